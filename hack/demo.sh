#!/usr/bin/env bash
# make demo: a local cluster (real kube-apiserver, controller-manager, scheduler; KWOK GPU
# nodes), Prometheus backfilled with a production GPU trace, gpufrac's recommender, and a
# readable result. Leaves everything running; `make demo-down` stops it.
#
# TRACE=dir     a GenTD26 directory (default ../shared/data/gentd26; synthetic data if absent)
# GPU_MEMORY    GPU size the savings are packed onto (default 80Gi)
# MODE=apply    then also apply the recommendations: admission webhook + updater, autoscalers
#               switched to updateMode Recreate (annotations backend), pods replaced
# APPLY_WAIT    seconds to wait for replacements in apply mode (default 180)
#
# Both modes also show the sharing planner in dry run: a GPUSharingPolicy over the KWOK
# pool for the workloads that fit two per GPU, and `gpufrac plan` (GPUs freed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/bin
out=$root/_out/demo
trace_dir=${TRACE:-$root/../shared/data/gentd26}
mode=${MODE:-}
gpu_memory=${GPU_MEMORY:-80Gi}
# Bold headings on a terminal only: piped into a file or a CI log, no escape codes.
if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
say() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
# rows N CMD: a table read from stdin, cut to its header and first N rows, then how many
# rows were left out and the command (CMD) that prints them all. The table ends at its
# first blank line; what follows it (a report's totals) passes through whole.
rows() {
  awk -v n="$1" -v cmd="$2" '
    after { print; next }
    /^$/ && NR > 1 { if (NR - 2 > n) printf "... %d more row%s: %s\n", NR - 2 - n, (NR - 2 - n == 1 ? "" : "s"), cmd; after = 1; print; next }
    NR <= n + 1 { print }
    END { if (!after && NR - 1 > n) printf "... %d more row%s: %s\n", NR - 1 - n, (NR - 1 - n == 1 ? "" : "s"), cmd }'
}

"$root/hack/demo-down.sh" >/dev/null 2>&1 || true
rm -rf "$out" && mkdir -p "$out"
start=$(date +%s)

if [ -d "$trace_dir" ]; then
  say "Importing the GenTD26 production trace from $trace_dir"
  "$bin/gpufrac" trace import --format gentd26 --input "$trace_dir" --output "$out/trace.om" \
    --manifests "$out/workloads.yaml" --long-csv "$out/trace.csv" --gpu-memory "$gpu_memory" --latency-objective 90s
  data="GenTD26 (Lin et al., SoCC 2025)"
else
  say "No trace at $trace_dir: generating a synthetic one (24 workloads, 24h)"
  "$bin/gpufrac" trace synth --workloads 24 --pods-per-workload 1 --duration 24h --seed 1 \
    --output "$out/trace.om" --manifests "$out/workloads.yaml" --long-csv "$out/trace.csv"
  data="synthetic (gpufrac trace synth --seed 1)"
fi
pods=$(grep -A3 '^kind: Deployment' "$out/workloads.yaml" | grep -c '^kind: Deployment' || true)
nodes=$(( pods / 8 + 1 ))

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Prometheus scrapes the recommender's metrics (the before/after series) on this port,
# and the node agent's per-pod GPU metrics on aport.
rport=$(free_port)
aport=$(free_port)

say "Starting the local cluster ($nodes KWOK nodes × 8 GPUs) and Prometheus with the trace backfilled"
"$bin/gpufrac-cluster" up --dir "$out/cluster" --gpu-nodes "$nodes" --backfill "$out/trace.om" \
  --scrape-target "127.0.0.1:$rport" --scrape-target "127.0.0.1:$aport" |
  sed '/^stop with:/d' | tee "$out/cluster.txt" # the demo stops with make demo-down (below), not the cluster's own line
export KUBECONFIG=$out/cluster/kubeconfig
prom=$(grep -o 'PROMETHEUS_URL=[^ ]*' "$out/cluster.txt" | head -1 | cut -d= -f2)

say "Installing the CRDs and one Deployment + recommendation-only GPUFractionAutoscaler per workload"
kubectl apply -f "$root/charts/gpufrac/crds" >/dev/null
kubectl wait --for condition=established --timeout=60s crd/gpufractionautoscalers.autoscaling.gpufrac.io crd/gpufractionrecommendations.autoscaling.gpufrac.io crd/gpusharingpolicies.autoscaling.gpufrac.io >/dev/null
kubectl apply -f "$out/workloads.yaml" >/dev/null
kubectl wait --for condition=Available --timeout=120s deployment --all -A >/dev/null
want=$(kubectl get gfa -A --no-headers | wc -l)

# The backfill is the history of the trace's pods, which have ended; the demo's pods are
# KWOK pods on fake GPUs. The node agent in simulated mode (docs/agent.md) replays the
# trace on fake GPUs from its start and attributes each trace pod to the live pod of its
# Deployment, so the live pods report GPU samples as they would on a GPU node (the
# recommender reads each pod from the most precise source: the agent for live pods,
# the backfilled dcgm-exporter series for the trace's). Without it the recommender sees
# running pods without samples (MetricsUnavailable, NoSamplesWhileRunning) and the
# updater shrinks nothing.
say "Starting the node agent in simulated mode: the trace replayed on $(( nodes * 8 )) fake GPUs for the live pods"
nohup "$bin/agent" --simulate --trace "$out/trace.csv" --kubeconfig "$KUBECONFIG" --listen "127.0.0.1:$aport" \
  --simulate-gpus "$(( nodes * 8 ))" --simulate-gpu-memory "$gpu_memory" >"$out/agent.log" 2>&1 &
echo $! >"$out/agent.pid"
for _ in $(seq 1 60); do curl -fs "http://127.0.0.1:$aport/readyz" >/dev/null 2>&1 && break; sleep 1; done
curl -fs "http://127.0.0.1:$aport/readyz" >/dev/null || { echo "agent not ready: see $out/agent.log"; exit 1; }

# gpufrac's own namespace: the recommender's status Lease (renewed after each cycle; the
# updater of MODE=apply changes pods only while it is fresh) and the webhook's.
sysns=gpufrac-system
kubectl create namespace "$sysns" >/dev/null 2>&1 || true
say "Starting the recommender (history bootstrap from Prometheus, then a cycle every 15s)"
nohup "$bin/recommender" --kubeconfig "$KUBECONFIG" --prometheus-url "$prom" --interval 15s \
  --history-length 72h --leader-elect=false --metrics-bind-address "127.0.0.1:$rport" \
  --status-lease-namespace "$sysns" \
  --sharing-plan-interval 10s \
  --health-probe-bind-address 127.0.0.1:0 >"$out/recommender.log" 2>&1 &
echo $! >"$out/recommender.pid"
rec_start=$(date +%s)

for _ in $(seq 1 120); do
  got=$(kubectl get gfr -A -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="RecommendationProvided")].status}{"\n"}{end}' 2>/dev/null | grep -c True || true)
  [ "$got" -ge "$want" ] && break
  sleep 1
done

say "kubectl get gfa -A (the autoscalers, each with its recommendation)"
kubectl get gfa -A | rows 8 "kubectl get gfa,gfr -A"
say "Savings report (data: $data; GPUs of $gpu_memory)"
"$bin/gpufrac" report --kubeconfig "$KUBECONFIG" --gpu-memory "$gpu_memory" | rows 12 "bin/gpufrac report --gpu-memory $gpu_memory"

# The sharing planner, dry run: the workloads the planner can put two per GPU opt in with
# a label, selected by its own rules (docs/sharing-planner.md): a recommendation provided
# and at least the planner's and the webhook's 50 % confident; two copies of its memory
# fit one GPU of the pool, which the planner takes as the smaller of the policy's
# gpuMemory (GPU_MEMORY) and the nodes' nvidia.com/gpu.memory label (81559 MiB on the
# KWOK nodes, the usable memory of an 80 GB GPU, less than 80Gi); and two copies of its
# compute fit the compute budget of one GPU (at most 500m). One GPUSharingPolicy over the
# KWOK pool then sizes NVIDIA device-plugin time-slicing for them.
say "Sharing planner (dry run): NVIDIA device-plugin time-slicing for the confident workloads that fit two per GPU"
pool_mib=$(kubectl get nodes -l type=kwok -o jsonpath='{range .items[*]}{.metadata.labels.nvidia\.com/gpu\.memory}{"\n"}{end}' | grep -E '^[0-9]+$' | sort -n | head -1 || true)
kubectl get gfr -A -o json | python3 -c '
import json, re, sys
from decimal import Decimal
units = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "m": Decimal("0.001")}
def q(s):  # a quantity, exactly: bytes for memory, GPUs for compute
    n, u = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", s).groups()
    return Decimal(n) * units[u]
gpu = q(sys.argv[1])
if sys.argv[2]:
    gpu = min(gpu, int(sys.argv[2]) * 2**20)  # as the planner: never a GPU larger than the smallest of the pool
print("GPU memory the plan uses: %d MiB (the smaller of GPU_MEMORY %s and the nodes%s nvidia.com/gpu.memory label, %s MiB); opting in up to %d MiB and 500m per pod"
      % (gpu // 2**20, sys.argv[1], chr(39), sys.argv[2] or "none", gpu // 2 // 2**20), file=sys.stderr)
for r in json.load(sys.stdin)["items"]:
    st = r.get("status", {})
    provided = any(c.get("type") == "RecommendationProvided" and c.get("status") == "True" for c in st.get("conditions", []))
    if provided and "memory" in st and 2 * q(st["memory"]) <= gpu and 2 * q(st.get("compute", "0")) <= 1 and st.get("confidencePercent", 0) >= 50:
        print(r["metadata"]["namespace"], r["metadata"]["name"])
' "$gpu_memory" "$pool_mib" | while read -r ns name; do kubectl label gfa -n "$ns" "$name" gpufrac.io/share=demo --overwrite >/dev/null; done
echo "$(kubectl get gfa -A -l gpufrac.io/share=demo --no-headers | wc -l) of $want autoscalers opted in (label gpufrac.io/share=demo)"
kubectl apply -f - >/dev/null <<EOF
apiVersion: autoscaling.gpufrac.io/v1alpha1
kind: GPUSharingPolicy
metadata: {name: demo-pool}
spec:
  nodeSelector: {matchLabels: {type: kwok}}
  autoscalerSelector: {matchLabels: {gpufrac.io/share: demo}}
  mode: DryRun
  gpuMemory: $gpu_memory
  configMap: {namespace: gpu-operator, name: device-plugin-config}
EOF
for _ in $(seq 1 30); do
  [ -n "$(kubectl get gsp demo-pool -o jsonpath='{.status.replicas}' 2>/dev/null)" ] && break
  sleep 1
done
"$bin/gpufrac" plan --kubeconfig "$KUBECONFIG"

if [ "$mode" = "apply" ]; then
  nss=$(kubectl get gfa -A -o jsonpath='{range .items[*]}{.metadata.namespace}{"\n"}{end}' | sort -u)
  pods_before=$(for ns in $nss; do kubectl get pods -n "$ns" --no-headers 2>/dev/null; done | wc -l)
  wport=$(free_port); wprobe=$(free_port); uprobe=$(free_port)

  say "MODE=apply: starting the admission webhook (127.0.0.1:$wport, registered by URL, self-managed CA) and the updater"
  for ns in $nss; do kubectl label namespace "$ns" gpufrac.io/demo=apply --overwrite >/dev/null; done
  nohup "$bin/admission" --kubeconfig "$KUBECONFIG" --namespace "$sysns" --identity demo-admission \
    --webhook-host 127.0.0.1 --webhook-port "$wport" --register-webhooks --webhook-url "https://127.0.0.1:$wport" \
    --webhook-config-name gpufrac-admission-demo --namespace-label-selector gpufrac.io/demo=apply \
    --gpu-memory "$gpu_memory" --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address "127.0.0.1:$wprobe" \
    >"$out/admission.log" 2>&1 &
  echo $! >"$out/admission.pid"
  for _ in $(seq 1 60); do curl -fs "http://127.0.0.1:$wprobe/readyz" >/dev/null 2>&1 && break; sleep 1; done
  curl -fs "http://127.0.0.1:$wprobe/readyz" >/dev/null || { echo "admission webhook not ready: see $out/admission.log"; exit 1; }
  # Short timings so the demo shows replacements in minutes (chart defaults: 1m interval,
  # 2m warm-up, 12h min pod age, a change inside the bounds must persist 5m); whole-GPU
  # pods above their upper bound are replaced at any age anyway.
  nohup "$bin/updater" --kubeconfig "$KUBECONFIG" --leader-elect=false --admission-namespace "$sysns" \
    --watch-namespaces "$(echo $nss | tr ' ' ',')" --gpu-memory "$gpu_memory" --interval 5s --warm-up 10s \
    --min-pod-age 1m --persist-for 20s --min-replacement-interval 1m \
    --eviction-rate 2 --eviction-burst 10 --metrics-bind-address 127.0.0.1:0 \
    --health-probe-bind-address "127.0.0.1:$uprobe" >"$out/updater.log" 2>&1 &
  echo $! >"$out/updater.pid"
  for _ in $(seq 1 60); do curl -fs "http://127.0.0.1:$uprobe/readyz" >/dev/null 2>&1 && break; sleep 1; done

  say "Switching every autoscaler to updateMode Recreate, annotations backend, minReplicas 1 (the demo's Deployments have one pod)"
  kubectl get gfa -A --no-headers -o custom-columns=NS:.metadata.namespace,NAME:.metadata.name | while read -r ns name; do
    kubectl patch gfa -n "$ns" "$name" --type merge \
      -p '{"spec":{"updatePolicy":{"updateMode":"Recreate","minReplicas":1},"backend":{"type":"annotations"}}}' >/dev/null
  done
  # Only recommendations at or above the webhook's minimum confidence (50 %) are applied;
  # the others keep their whole GPU.
  eligible=$(kubectl get gfr -A -o jsonpath='{range .items[*]}{.status.confidencePercent}{"\n"}{end}' | awk '$1>=50' | wc -l)
  echo "$want autoscalers, $eligible with confidence >= 50% (the webhook applies only those)"
  wait_s=${APPLY_WAIT:-180}
  say "Waiting up to ${wait_s}s for the updater to replace pods"
  # Waiting ends when every eligible pod is replaced, or when the updater has evaluated
  # every eligible autoscaler since the patch and none has a pod left that it may still
  # replace: the rest are in date, or held for a reason that waiting does not end
  # (metrics-unavailable: no samples while running; guardrail-active, below-floor,
  # compute-held, low-confidence, record-invalid), and so for three checks in a row
  # with no pod replaced in between: a workload whose pods were just replaced has no
  # samples for a cycle or two, so metrics-unavailable also holds pods for a while right
  # after the switch. Else at APPLY_WAIT.
  left_to_replace() {
    kubectl get gfa,gfr -A -o json | python3 -c '
import json, sys
held = {"metrics-unavailable", "guardrail-active", "below-floor", "compute-held", "low-confidence", "record-invalid"}
items = json.load(sys.stdin)["items"]
conf = {(r["metadata"]["namespace"], r["metadata"]["name"]): r.get("status", {}).get("confidencePercent", 0)
        for r in items if r["kind"] == "GPUFractionRecommendation"}
left = blocked = 0
for a in items:
    if a["kind"] != "GPUFractionAutoscaler" or conf.get((a["metadata"]["namespace"], a["metadata"]["name"]), 0) < 50:
        continue
    u = a.get("status", {}).get("updater")
    if not u or u.get("observedGeneration", 0) < a["metadata"]["generation"]:
        left += 1  # not evaluated since the switch to Recreate
    elif u.get("podsOutOfDate", 0) > 0:
        reasons = {x.get("skipReason", "") for x in u.get("updates", [])} or {u.get("blockedReason", "")}
        if reasons <= held:
            blocked += 1
        else:
            left += 1
print(left, blocked)
'
  }
  t0=$(date +%s)
  applied=0 settled=0
  while :; do
    before=$applied
    applied=$(for ns in $nss; do kubectl get pods -n "$ns" -o jsonpath='{range .items[*]}{.metadata.deletionTimestamp}{"|"}{.metadata.annotations.gpufrac\.io/applied}{"\n"}{end}'; done | grep -c '^|{' || true)
    read -r left blocked < <(left_to_replace || echo 1 0)
    left=${left:-1} blocked=${blocked:-0}
    el=$(( $(date +%s) - t0 ))
    echo "  ${el}s: $applied of $eligible eligible pods replaced with their fraction, $blocked held by the updater"
    [ "$applied" -ge "$eligible" ] && break
    if [ "$left" -eq 0 ] && [ "$applied" -eq "$before" ]; then settled=$((settled + 1)); else settled=0; fi
    [ "$settled" -ge 3 ] && { echo "  nothing left to replace: the other eligible pods are held (UPDATER column below: blocked: REASON)"; break; }
    [ "$el" -ge "$wait_s" ] && { echo "  stopped waiting after ${wait_s}s ($left autoscalers still with a pod to replace)"; break; }
    sleep 10
  done

  sleep 6 # one updater cycle, so status.updater reflects the replacements
  say "bin/gpufrac status -A"
  "$bin/gpufrac" status -A --kubeconfig "$KUBECONFIG" | rows 12 "bin/gpufrac status -A"
  sleep 20 # a recommender cycle and a scrape, so Prometheus has the replaced pods
  say "Before/after, live: GPUs at one per pod against what gpufrac wrote, since the recommender started (from Prometheus)"
  "$bin/gpufrac" report --kubeconfig "$KUBECONFIG" --gpu-memory "$gpu_memory" \
    --since "$(( $(date +%s) - rec_start + 30 ))s" --prometheus-url "$prom" | sed -n '/^Before and after/,$p'
  say "Packed snapshot"
  "$bin/gpufrac" report --kubeconfig "$KUBECONFIG" --gpu-memory "$gpu_memory" | sed -n '/^[0-9]* workloads, /,$p' # the totals
  echo "Pods now running with an applied fraction: $applied of $pods_before (the rest keep a whole GPU: confidence < 50%, held by the updater (UPDATER column of gpufrac status: blocked: REASON) or not yet replaced)"
  echo "  webhook log: $out/admission.log    updater log: $out/updater.log"
fi

echo
echo "Ready in $(( $(date +%s) - start ))s. The cluster keeps running:"
echo "  export KUBECONFIG=$KUBECONFIG"
echo "  kubectl describe gfr -n gentd26 sd-000      # why this value: conditions, bounds, sharing-mode reason"
echo "  Prometheus: $prom    recommender log: $out/recommender.log    agent log: $out/agent.log"
echo "  make demo-down                              # stop everything"
