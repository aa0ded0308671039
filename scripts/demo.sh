#!/usr/bin/env bash
# make demo: a sandbox with the default fleet, the CRDs, the operator, the example groups and
# training jobs of each fleet; then what happened. `make demo-down` stops it all.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
NAME=${SANDBOX:-demo}
FLEET=${FLEET:-mixed}
STATE=.venv/demo
mkdir -p "$STATE"

scripts/demo-down.sh >/dev/null 2>&1 || true
$BIN/goodput sandbox up --name "$NAME" --fleet "$FLEET"
eval "$($BIN/goodput sandbox env --name "$NAME")"

echo; echo "== Installing the CRDs"
kubectl apply --server-side -f crds/ >/dev/null
kubectl wait --for condition=Established --timeout=60s crd/trainingjobs.goodput.dev \
  crd/ultraservergroups.goodput.dev crd/inferenceendpoints.goodput.dev >/dev/null

echo "== Starting the operator (log: $STATE/operator.log)"
nohup $BIN/goodput-operator --health-port 18080 --metrics-port 19090 --report-port 18081 \
  >"$STATE/operator.log" 2>&1 &
echo $! >"$STATE/operator.pid"
for _ in $(seq 60); do
  curl -sf localhost:18080/healthz >/dev/null && break
  sleep 0.5
done

# the examples written for the fleet (examples/FLEET/); the default fleet holds trn2, p5 and
# nvl72 nodes. The first job applied is the one a node of fails below.
if [ "$FLEET" = mixed ]; then EXAMPLES="trn2 p5 nvl72"; else EXAMPLES=$FLEET; fi
for fleet in $EXAMPLES; do
  [ -d "examples/$fleet" ] || { echo "no examples/$fleet/ for FLEET=$FLEET" >&2; exit 1; }
done
echo "== Applying the example UltraServerGroups and TrainingJobs (${EXAMPLES// /, })"
kubectl create namespace demo >/dev/null 2>&1 || true
JOB=
for fleet in $EXAMPLES; do
  for group in examples/$fleet/ultraservergroup*.yaml; do
    case "$group" in *-real.yaml) continue;; esac
    kubectl apply --server-side -f "$group" >/dev/null
  done
  for job in examples/$fleet/trainingjob*.yaml; do
    # the real-node trainer runs on real nodes only (make demo REAL_NODES=1)
    grep -q 'ultraServerGroup: .*-real$' "$job" && continue
    kubectl apply --server-side -n demo -f "$job" >/dev/null
    JOB=${JOB:-$(sed -n 's/^  name: //p' "$job" | head -1)}
  done
done

echo "== Waiting for the jobs to run"
kubectl wait -n demo --for=jsonpath='{.status.phase}'=Running tj --all --timeout=90s >/dev/null \
  || echo "(some jobs are not Running yet: see their conditions below)"
echo
kubectl get usg
echo
kubectl get tj -n demo -o wide
echo

GROUP=$(kubectl get tj -n demo "$JOB" -o jsonpath='{.spec.ultraServerGroup}')
victim=$($BIN/goodput placement -n demo $JOB --rank 1)
echo "== A node fails: $victim (rank 1 of $JOB) — quarantine, spare, restart"
case "$(kubectl get usg "$GROUP" -o jsonpath='{.spec.accelerator.resource}')" in
  nvidia.com/*) REASON=GpuXidError;; google.com/tpu) REASON=TpuHostError;;
  *) REASON=NeuronDeviceError;;
esac
$BIN/goodput sandbox fail-node --name "$NAME" "$victim" --reason "$REASON" >/dev/null
kubectl wait -n demo tj/$JOB --for=jsonpath='{.status.restarts}'=1 --timeout=60s >/dev/null
kubectl wait -n demo tj/$JOB --for=jsonpath='{.status.phase}'=Running --timeout=60s >/dev/null \
  || echo "($JOB is not Running again yet: kubectl describe tj -n demo $JOB)"
kubectl get tj -n demo $JOB -o jsonpath='{range .status.incidents[*]}restart {.restart}: {.cause} on {.nodes[0]} -> {.action}; detection {.detectionSeconds}s, replacement {.replacementSeconds}s, restart {.restartSeconds}s{"\n"}{end}'
kubectl get node "$victim" -o jsonpath='{.metadata.annotations.goodput\.dev/quarantine-evidence}{"\n"}'
echo
kubectl get usg "$GROUP"
echo
$BIN/goodput topology --output "$STATE/fleet.svg"
echo
$BIN/goodput report --svg "$STATE/accounting.svg"
cat <<EOT

The sandbox and the operator keep running:
  eval \$($BIN/goodput sandbox env --name $NAME)     # then kubectl get tj -A, kubectl describe tj ...
  $BIN/goodput topology                              # the picture again ($STATE/fleet.svg as SVG)
  $BIN/goodput sandbox heal-node --name $NAME $victim; $BIN/goodput node release $victim
  curl localhost:19090/metrics | grep ^goodput_      # the operator's metrics
  make demo-down                                     # stop the operator and the sandbox
EOT
