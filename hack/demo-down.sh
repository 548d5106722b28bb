#!/usr/bin/env bash
# make demo-down: stops the updater, admission webhook, recommender, node agent and the local cluster started by make demo, by PID.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/_out/demo
stopped=()
for c in updater admission recommender agent; do
  if [ -f "$out/$c.pid" ]; then
    pid=$(cat "$out/$c.pid")
    kill "$pid" 2>/dev/null && stopped+=("$c") && for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null
    rm -f "$out/$c.pid"
  fi
done
echo "gpufrac stopped: ${#stopped[@]} process(es)${stopped:+ (${stopped[*]})}"
if [ -f "$out/cluster/state.json" ]; then
  "$root/bin/gpufrac-cluster" down --dir "$out/cluster"
fi
echo "demo stopped"
