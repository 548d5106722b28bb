#!/usr/bin/env bash
# make demo: a local cluster (real kube-apiserver, controller-manager, scheduler; KWOK GPU
# nodes), Prometheus backfilled with a production GPU trace, gpufrac's recommender, and a
# readable result. Leaves everything running; `make demo-down` stops it.
#
# TRACE=dir     a GenTD26 directory (default ../shared/data/gentd26; synthetic data if absent)
# GPU_MEMORY    GPU size the savings are packed onto (default 80Gi)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/bin
out=$root/_out/demo
trace_dir=${TRACE:-$root/../shared/data/gentd26}
gpu_memory=${GPU_MEMORY:-80Gi}
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

"$root/hack/demo-down.sh" >/dev/null 2>&1 || true
rm -rf "$out" && mkdir -p "$out"
start=$(date +%s)

if [ -d "$trace_dir" ]; then
  say "Importing the GenTD26 production trace from $trace_dir"
  "$bin/gpufrac" trace import --format gentd26 --input "$trace_dir" --output "$out/trace.om" \
    --manifests "$out/workloads.yaml" --gpu-memory "$gpu_memory" --latency-objective 90s
  data="GenTD26 (Lin et al., SoCC 2025)"
else
  say "No trace at $trace_dir: generating a synthetic one (24 workloads, 24h)"
  "$bin/gpufrac" trace synth --workloads 24 --pods-per-workload 1 --duration 24h --seed 1 \
    --output "$out/trace.om" --manifests "$out/workloads.yaml"
  data="synthetic (gpufrac trace synth --seed 1)"
fi
pods=$(grep -A3 '^kind: Deployment' "$out/workloads.yaml" | grep -c '^kind: Deployment' || true)
nodes=$(( pods / 8 + 1 ))

say "Starting the local cluster ($nodes KWOK nodes × 8 GPUs) and Prometheus with the trace backfilled"
"$bin/gpufrac-cluster" up --dir "$out/cluster" --gpu-nodes "$nodes" --backfill "$out/trace.om" | tee "$out/cluster.txt"
export KUBECONFIG=$out/cluster/kubeconfig
prom=$(grep -o 'PROMETHEUS_URL=[^ ]*' "$out/cluster.txt" | head -1 | cut -d= -f2)

say "Installing the CRDs and one Deployment + recommendation-only GPUFractionAutoscaler per workload"
kubectl apply -f "$root/charts/gpufrac/crds" >/dev/null
kubectl wait --for condition=established --timeout=60s crd/gpufractionautoscalers.autoscaling.gpufrac.io crd/gpufractionrecommendations.autoscaling.gpufrac.io >/dev/null
kubectl apply -f "$out/workloads.yaml" >/dev/null
kubectl wait --for condition=Available --timeout=120s deployment --all -A >/dev/null
want=$(kubectl get gfa -A --no-headers | wc -l)

say "Starting the recommender (history bootstrap from Prometheus, then a cycle every 15s)"
nohup "$bin/recommender" --kubeconfig "$KUBECONFIG" --prometheus-url "$prom" --interval 15s \
  --history-length 72h --leader-elect=false --metrics-bind-address 127.0.0.1:0 \
  --health-probe-bind-address 127.0.0.1:0 >"$out/recommender.log" 2>&1 &
echo $! >"$out/recommender.pid"

for _ in $(seq 1 120); do
  got=$(kubectl get gfr -A -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="RecommendationProvided")].status}{"\n"}{end}' 2>/dev/null | grep -c True || true)
  [ "$got" -ge "$want" ] && break
  sleep 1
done

say "kubectl get gfa,gfr -A"
kubectl get gfa,gfr -A
say "Savings report (data: $data; GPUs of $gpu_memory)"
"$bin/gpufrac" report --kubeconfig "$KUBECONFIG" --gpu-memory "$gpu_memory"
echo
echo "Ready in $(( $(date +%s) - start ))s. The cluster keeps running:"
echo "  export KUBECONFIG=$KUBECONFIG"
echo "  kubectl describe gfr -n gentd26 sd-000      # why this value: conditions, bounds, sharing-mode reason"
echo "  Prometheus: $prom    recommender log: $out/recommender.log"
echo "  make demo-down                              # stop everything"
