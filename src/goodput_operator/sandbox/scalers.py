"""The autoscalers our InferenceEndpoints are measured against (issue 46; PEERS.md), beside
a sandbox: the real HPA through prometheus-adapter v0.12.0, and KEDA v2.21.0.

The HPA controller already runs in the sandbox's kube-controller-manager (15 s sync, 10%
tolerance, 300 s scale-down window: Kubernetes' defaults). What it lacks is a custom
metrics API: prometheus-adapter serves `custom.metrics.k8s.io` from a Prometheus, as a
plain process on 127.0.0.1. KEDA's operator (ScaledObjects -> HPAs, its scalers asking
Prometheus) and its metrics server (`external.metrics.k8s.io`, asking the operator over
gRPC with mutual TLS) run the same way. Both are built from their Go modules (cached).

What a Deployment would get from the peers' manifests is done here instead:
- each API server is registered by an APIService whose Service is an ExternalName
  `localhost` (the aggregator then calls https://localhost:PORT; kwokctl registers its
  metrics-server the same way), TLS verification skipped as kwokctl's does;
- the aggregated servers read the sandbox's admin kubeconfig; KEDA's cluster-object
  namespace is `keda` (its chart's), its certificates (CA, serving and client) are made
  for the sandbox, and its own certificate rotation and APIService patching are off.

The configuration each peer gets (`adapter_rules`, `hpa`, `scaled_object`, `api_service`)
is pure and unit-tested; the benchmark that uses them is bench/autoscaling_peers.py.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from goodput_operator.sandbox import build, kueue, procs
from goodput_operator.sandbox.build import Progress
from goodput_operator.sandbox.cluster import Sandbox, SandboxError, require_running
from goodput_operator.sandbox.versions import KEDA_COMPONENT, PROMETHEUS_ADAPTER_COMPONENT

Obj = dict[str, Any]
NAMESPACE = "keda"  # KEDA's cluster-object namespace, and where the APIServices' Services are
CUSTOM_METRICS = "v1beta1.custom.metrics.k8s.io"
EXTERNAL_METRICS = "v1beta1.external.metrics.k8s.io"
KEDA_CRDS = "config/crd/bases"
# the vLLM series the adapter serves as per-pod custom metrics, `:` turned into `_` (a
# custom metric's name is a path segment)
ADAPTED = ("vllm:num_requests_waiting", "vllm:num_requests_running")
RATE = "vllm:request_success_total"  # served as vllm_request_success_per_second


def adapter_rules() -> Obj:
    """prometheus-adapter's rules: each ADAPTED gauge per pod as it is, and RATE's rate
    over one minute per pod; series with a namespace and a pod label only."""
    overrides = {"resources": {"overrides": {"namespace": {"resource": "namespace"},
                                             "pod": {"resource": "pod"}}}}
    rules = [{"seriesQuery": f'{{__name__="{series}",namespace!="",pod!=""}}', **overrides,
              "name": {"matches": "^(.*)$", "as": series.replace(":", "_")},
              "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"}
             for series in ADAPTED]
    rules.append({"seriesQuery": f'{{__name__="{RATE}",namespace!="",pod!=""}}', **overrides,
                  "name": {"matches": "^vllm:(.*)_total$", "as": "vllm_${1}_per_second"},
                  "metricsQuery": "sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m])) "
                                  "by (<<.GroupBy>>)"})
    return {"rules": rules}


def api_service(name: str, port: int) -> list[Obj]:
    """APIService NAME (`v1beta1.GROUP`) served on 127.0.0.1:PORT, through an ExternalName
    Service `localhost` in NAMESPACE."""
    version, group = name.split(".", 1)
    service = f"{group.split('.')[0]}-metrics-{version}"
    return [
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": service, "namespace": NAMESPACE},
         "spec": {"type": "ExternalName", "externalName": "localhost",
                  "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": name},
         "spec": {"group": group, "version": version, "insecureSkipTLSVerify": True,
                  "groupPriorityMinimum": 100, "versionPriority": 100,
                  "service": {"name": service, "namespace": NAMESPACE, "port": port}}},
    ]


# the kinds an autoscaler here scales (each has the scale subresource): their API version
SCALED = {"Deployment": "apps/v1", "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1"}


def hpa(name: str, namespace: str, metrics: dict[str, float], max_replicas: int,
        min_replicas: int = 1, kind: str = "Deployment") -> Obj:
    """An autoscaling/v2 HPA on NAME of KIND (SCALED), its behavior Kubernetes' default:
    each of METRICS (a per-pod custom metric) at its average per replica, the largest need
    wins. A LeaderWorkerSet's replica is a group: its scale selector picks the leaders."""
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"scaleTargetRef": {"apiVersion": SCALED[kind], "kind": kind,
                                        "name": name},
                     "minReplicas": min_replicas, "maxReplicas": max_replicas,
                     "metrics": [{"type": "Pods", "pods": {
                         "metric": {"name": metric},
                         "target": {"type": "AverageValue", "averageValue": f"{average:g}"}}}
                         for metric, average in metrics.items()]}}


def scaled_object(name: str, namespace: str, prometheus: str, queries: dict[str, float],
                  max_replicas: int, min_replicas: int = 1, polling_seconds: int | None = None,
                  kind: str = "Deployment") -> Obj:
    """A KEDA ScaledObject on NAME of KIND (SCALED): one Prometheus trigger per query of
    QUERIES, against its threshold per replica (KEDA's AverageValue), polled every
    POLLING_SECONDS (KEDA's 30 when None)."""
    polling = {} if polling_seconds is None else {"pollingInterval": polling_seconds}
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"scaleTargetRef": {"apiVersion": SCALED[kind], "kind": kind,
                                        "name": name}, **polling,
                     "minReplicaCount": min_replicas, "maxReplicaCount": max_replicas,
                     "triggers": [{"type": "prometheus", "metadata": {
                         "serverAddress": prometheus, "query": query,
                         "threshold": f"{threshold:g}"}}
                         for query, threshold in queries.items()]}}


def home(sandbox: Sandbox) -> Path:
    return sandbox.home / "scalers"


def _pid(sandbox: Sandbox, name: str) -> Path:
    return home(sandbox) / f"{name}.pid"


def pid(sandbox: Sandbox, name: str) -> int:
    """The pid of scaler process NAME (prometheus-adapter, keda-operator, keda-adapter)."""
    return int(_pid(sandbox, name).read_text())


def _spawn(sandbox: Sandbox, name: str, args: list[str], env: dict[str, str] | None = None
           ) -> None:
    """Run ARGS as NAME, logging to NAME.log, its pid kept for `stop`."""
    procs.kill_pidfile(_pid(sandbox, name))
    procs.spawn(args, home(sandbox) / f"{name}.log", _pid(sandbox, name), env)


def _register(sandbox: Sandbox, name: str, port: int, log: Path, timeout: float = 120
              ) -> None:
    """APIService NAME for 127.0.0.1:PORT; returns once the API server serves it."""
    sandbox.kubectl("create", "namespace", NAMESPACE, check=False)
    sandbox.apply(*api_service(name, port))
    version, group = name.split(".", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = sandbox.kubectl("get", "--raw", f"/apis/{group}/{version}", check=False)
        if '"resources"' in answer.stdout:
            return
        time.sleep(1)
    tail = log.read_text(errors="replace")[-1500:] if log.is_file() else "(no log)"
    raise SandboxError(f"{name} was not served within {timeout:.0f}s; its log ends:\n{tail}")


def start_adapter(sandbox: Sandbox, prometheus: str,
                  progress: Progress = build.print_progress) -> None:
    """prometheus-adapter for SANDBOX reading PROMETHEUS (a URL), serving the custom metrics
    API the HPA reads; ready when this returns."""
    require_running(sandbox)
    binaries = build.build(PROMETHEUS_ADAPTER_COMPONENT, progress)
    here = home(sandbox)
    here.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    config = here / "adapter-rules.yaml"
    config.write_text(yaml.safe_dump(adapter_rules()))
    port = procs.free_port()
    kubeconfig = str(sandbox.kubeconfig)
    _spawn(sandbox, "prometheus-adapter", [
        str(binaries / "prometheus-adapter"), f"--prometheus-url={prometheus}",
        f"--config={config}", "--bind-address=127.0.0.1", f"--secure-port={port}",
        f"--cert-dir={here / 'adapter-certs'}", f"--lister-kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        # new series (a new pod's) are found on each relist: 10 min by default, which
        # would leave a new replica without a metric for minutes
        "--metrics-relist-interval=15s", "--v=1"])
    _register(sandbox, CUSTOM_METRICS, port, here / "prometheus-adapter.log")
    progress(f"prometheus-adapter {PROMETHEUS_ADAPTER_COMPONENT.version} is up in "
             f"{time.monotonic() - started:.0f}s (log: {here / 'prometheus-adapter.log'}).")


def start_keda(sandbox: Sandbox, progress: Progress = build.print_progress) -> None:
    """KEDA's operator and metrics server for SANDBOX; ready when this returns."""
    require_running(sandbox)
    binaries = build.build(KEDA_COMPONENT, progress)
    source = build.module_dir(KEDA_COMPONENT)
    here = home(sandbox)
    here.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    crds = str(source / KEDA_CRDS)
    sandbox.kubectl("apply", "--server-side", "--force-conflicts", "-f", crds, timeout=120)
    sandbox.kubectl("create", "namespace", NAMESPACE, check=False)
    certs = here / "keda-certs"
    kueue.certificates(certs)  # ca.crt, tls.crt, tls.key: what KEDA's gRPC reads on both ends
    env = {"KUBECONFIG": str(sandbox.kubeconfig), "WATCH_NAMESPACE": "",
           "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE, "POD_NAMESPACE": NAMESPACE}
    grpc, adapter = procs.free_port(), procs.free_port()
    _spawn(sandbox, "keda-operator", [
        str(binaries / "keda"), f"--metrics-bind-address=127.0.0.1:{procs.free_port()}",
        f"--health-probe-bind-address=127.0.0.1:{procs.free_port()}",
        f"--metrics-service-bind-address=127.0.0.1:{grpc}", f"--cert-dir={certs}",
        "--enable-cert-rotation=false", "--enable-webhook-patching=false",
        "--enable-apiservice-patching=false", "--leader-elect=false",
        "--kube-api-qps=200", "--kube-api-burst=300", "--zap-log-level=info"], env)
    _spawn(sandbox, "keda-adapter", [
        str(binaries / "keda-adapter"), f"--secure-port={adapter}", "--bind-address=127.0.0.1",
        f"--cert-dir={certs}", f"--tls-cert-file={certs / 'tls.crt'}",
        f"--tls-private-key-file={certs / 'tls.key'}",
        f"--metrics-service-address=127.0.0.1:{grpc}",
        "--metrics-service-grpc-authority=localhost",
        f"--lister-kubeconfig={sandbox.kubeconfig}",
        f"--authentication-kubeconfig={sandbox.kubeconfig}",
        f"--authorization-kubeconfig={sandbox.kubeconfig}",
        f"--port={procs.free_port()}", "--kube-api-qps=200", "--kube-api-burst=300"], env)
    _register(sandbox, EXTERNAL_METRICS, adapter, here / "keda-adapter.log")
    progress(f"KEDA {KEDA_COMPONENT.version} is up in {time.monotonic() - started:.0f}s "
             f"(logs: {here}/keda-operator.log, keda-adapter.log).")


def stop(sandbox: Sandbox) -> None:
    """Stop whichever of the scalers run, and take their APIServices out (an APIService
    nobody serves makes discovery fail for every client)."""
    for name in ("prometheus-adapter", "keda-operator", "keda-adapter"):
        procs.kill_pidfile(_pid(sandbox, name))
    if sandbox.is_running():
        sandbox.kubectl("delete", "apiservice", CUSTOM_METRICS, EXTERNAL_METRICS,
                        "--ignore-not-found", check=False)
