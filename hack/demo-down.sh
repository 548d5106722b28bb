#!/usr/bin/env bash
# make demo-down: stops the recommender and the local cluster started by make demo, by PID.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/_out/demo
if [ -f "$out/recommender.pid" ]; then
  pid=$(cat "$out/recommender.pid")
  kill "$pid" 2>/dev/null && for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null
  rm -f "$out/recommender.pid"
fi
if [ -f "$out/cluster/state.json" ]; then
  "$root/bin/gpufrac-cluster" down --dir "$out/cluster"
fi
echo "demo stopped"
