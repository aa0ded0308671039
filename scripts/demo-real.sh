#!/usr/bin/env bash
# make demo REAL_NODES=1: the same story on real nodes. A trn2 sandbox whose first 5 nodes
# are real kubelets (the first UltraServer plus one node of the second) and 2 system nodes,
# the operator as users run it (its image built from the Dockerfile, `helm install`ed: two
# replicas on the system nodes), and the example PyTorch trainer
# (examples/trainer/train.py) as a 4-worker TrainingJob. Mid-run
# one real node loses its kubelet (a partition: its container keeps running); the operator
# quarantines it once the controller-manager marks it NotReady (~50 s), moves the rank to
# the 5th node and the gang resumes from its last committed checkpoint.
# First run: builds the worker image (Debian + PyTorch, ~2-3 min), the operator image
# (~1.5 min) and CoreDNS (~2-6 min).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
NAME=${SANDBOX:-demo}
STATE=.venv/demo
mkdir -p "$STATE"

scripts/demo-down.sh >/dev/null 2>&1 || true
$BIN/goodput sandbox image --name "$NAME"   # make image: the system nodes import it as they start
$BIN/goodput sandbox up --name "$NAME" --fleet trn2 --real-nodes 5 --system-nodes 2
eval "$($BIN/goodput sandbox env --name "$NAME")"
VERSION=$($BIN/python -c 'import goodput_operator as g; print(g.__version__)')
HELM=$($BIN/python -c 'from goodput_operator.sandbox import build, versions
print(build.build(versions.HELM_COMPONENT) / "helm")')

echo; echo "== Installing the CRDs"
kubectl apply --server-side -f crds/ >/dev/null
kubectl wait --for condition=Established --timeout=60s crd/trainingjobs.goodput.dev \
  crd/ultraservergroups.goodput.dev >/dev/null

kubectl create namespace goodput-probes >/dev/null 2>&1 || true  # SDC probe Jobs run here
echo "== helm install: the operator's Deployment on the system nodes (the image is never pulled)"
"$HELM" install goodput-operator charts/goodput-operator --namespace goodput-system \
  --create-namespace --set image.pullPolicy=Never --set probeNamespace=goodput-probes \
  --set "probeImage=goodput.dev/worker:$VERSION" --set dashboards.enabled=false \
  --set-json 'nodeSelector={"sandbox.goodput.dev/system-node":"true"}' --wait --timeout 4m >/dev/null
kubectl -n goodput-system get pods -o wide -L goodput.dev/leader
leader=""
until [ -n "$leader" ]; do  # the leader labels its own pod (the reports Service selects it)
  leader=$(kubectl -n goodput-system get pods -l goodput.dev/leader=true -o jsonpath='{.items[*].metadata.name}')
  sleep 1
done
kubectl -n goodput-system logs "$leader" | grep -E 'initial sync|became the leader' | cut -c1-160

echo "== The real nodes' group and the example trainer (4 workers, 60 steps, checkpoint every 10)"
kubectl create namespace demo >/dev/null 2>&1 || true
kubectl apply --server-side -f examples/trn2/ultraservergroup-real.yaml >/dev/null
kubectl apply --server-side -n demo -f examples/trn2/trainingjob-trainer.yaml >/dev/null
JOB=trainer-demo
until kubectl get tj -n demo $JOB -o jsonpath='{.status.checkpoint.latest.step}' 2>/dev/null | grep -q .; do
  sleep 1
done
kubectl get tj -n demo $JOB -o wide
victim=$($BIN/goodput placement -n demo $JOB --rank 2)
step=$(kubectl get tj -n demo $JOB -o jsonpath='{.status.checkpoint.latest.step}')
echo
echo "== Checkpoint $step committed; $victim (rank 2) loses its kubelet: waiting for NotReady (~50 s)"
$BIN/goodput sandbox fail-node --name "$NAME" "$victim" >/dev/null
kubectl wait -n demo tj/$JOB --for=jsonpath='{.status.restarts}'=1 --timeout=180s >/dev/null
kubectl wait -n demo tj/$JOB --for=jsonpath='{.status.phase}'=Succeeded --timeout=300s >/dev/null \
  || echo "($JOB has not finished yet: kubectl describe tj -n demo $JOB)"
kubectl get tj -n demo $JOB -o jsonpath='{range .status.incidents[*]}restart {.restart}: {.cause} on {.nodes[0]}; detection {.detectionSeconds}s, replacement {.replacementSeconds}s, restart {.restartSeconds}s, lost work {.lostWorkSeconds}s{"\n"}{end}'
echo
kubectl logs -n demo "$JOB-r1-w0" | grep -E "resumed|FINAL" || true
$BIN/goodput sandbox heal-node --name "$NAME" "$victim" >/dev/null
cat <<EOT

The sandbox, its real nodes and the operator (helm release goodput-operator) keep running:
  eval \$($BIN/goodput sandbox env --name $NAME)   # kubectl get pods -n demo -o wide; kubectl logs ...
  kubectl -n goodput-system logs $leader             # the leading operator pod
  ls /var/lib/goodput-sandbox/shared/checkpoints/$JOB   # the checkpoints the job committed
  make demo-down                                   # stop everything; the host is left as it was
EOT
