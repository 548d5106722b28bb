#!/usr/bin/env bash
# GPU check of the gpufrac agent: builds cudaalloc (gcc only, no CUDA toolkit), then
# runs the gpucheck test, which starts cudaalloc holding GPUCHECK_BYTES (default
# 32 GiB) and a busy SM, samples real NVML with the agent's Sampler, and checks the
# reported memory is within 5% (and matches nvidia-smi within 1%) and the SM
# utilisation is at least 0.5. Needs an NVIDIA GPU and driver; see README.md.
#
# With Go on the machine it runs `go test -tags gpucheck`; without, set
# GPUCHECK_TEST to a test binary built elsewhere with
#   go test -c -tags gpucheck -o gpucheck.test ./agent/gpucheck
# Logs go to $OUT (default /tmp/gpucheck).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${OUT:-/tmp/gpucheck}
mkdir -p "$out"

nvidia-smi -L 2>&1 | tee "$out/nvidia-smi.txt" || echo "nvidia-smi not available" | tee -a "$out/nvidia-smi.txt"
gcc -O2 -Wall -o "$out/cudaalloc" "$here/testdata/cudaalloc.c" -ldl

export GPUCHECK_BIN="$out/cudaalloc" GPUCHECK_REQUIRE=1
if [[ -n "${GPUCHECK_TEST:-}" ]]; then
  "$GPUCHECK_TEST" -test.v -test.count=1 2>&1 | tee "$out/gpucheck.log"
else
  (cd "$root" && go test -tags gpucheck -count=1 -v ./agent/gpucheck/) 2>&1 | tee "$out/gpucheck.log"
fi
