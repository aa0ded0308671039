"""Autoscaling, head to head with the real HPA (through prometheus-adapter) and KEDA
(issue 46; ../shared/design/PEERS.md): the same load traces, in real time, on one KWOK fleet.

    python -m bench.autoscaling_peers [--json] [--minutes N] [--seed S]
                                      [--traces bursty,diurnal,flash]
                                      [--scalers hpa,hpa-tuned,keda,keda-tuned,goodput]
                                      [--cold-start S] [--group-nodes N] [--lookahead S]

One sandbox (Kubernetes v1.36.3, whose kube-controller-manager runs the HPA controller at its
defaults: 15 s sync, 10% tolerance, 300 s scale-down window), a real Prometheus scraping
every second, prometheus-adapter v0.12.0, KEDA v2.21.0 and the operator. For each trace kind
one namespace holds one scaled target per autoscaler, all replaying the same trace at once:

- `hpa`: a Deployment and an autoscaling/v2 HPA on the per-pod `vllm:num_requests_waiting`
  (average 8 queued requests per replica), behaviour at Kubernetes' defaults;
- `hpa-tuned`: the same plus the per-pod rate of `vllm:request_success_total` (target MU
  requests/s per replica), what a user adds once the queue alone proves slow;
- `keda`: a ScaledObject with a Prometheus trigger on the endpoint's summed queue
  (threshold 8), KEDA's defaults (30 s polling, 300 s cooldown);
- `keda-tuned`: polling every 5 s and a second trigger on the finished requests' rate;
- `goodput`: an InferenceEndpoint scaled on RequestRate (target MU) and QueueDepth (8),
  panic mode on (threshold 2x): bench/autoscaling.py's configuration of ours, read from the
  same Prometheus by the operator's default vLLM queries; `--lookahead S` sets its
  `lookaheadSeconds` (default 0, off: the arrival rate sized for where its rise takes it S
  seconds on, the queue where its trend does).

Every target starts with the replicas its trace's first minute needs (with 10% to spare),
serving that minute's average load for 90 s before the trace (minimum those replicas while
they warm, then 1), and may grow to 64 replicas of one accelerator each; the fleet holds
twice what all targets could ask, so no scaler waits for another's nodes. The load is
simulated here, once per second per target (bench/autoscaling.py's queue model): requests
arrive by the trace; each pod serves MU requests/s once COLD_START seconds have passed since
it was bound to a node (it is paid from that binding until its deletion starts); what is not
served waits in the queue. What a vLLM server would export is served to Prometheus for each
serving pod, with its namespace, pod and endpoint (the target's name) as labels: its share
of the queue (`vllm:num_requests_waiting`), of the requests in flight
(`vllm:num_requests_running`) and its finished requests (`vllm:request_success_total`). A
pod still starting exports nothing, as a vLLM server that is not up yet.

With `--group-nodes N` (N > 1) every replica is a group of N whole nodes (16 accelerators
each) that serves GROUP_SPEEDUP times one single-node replica's requests (a larger model),
queued requests and rates targeted per group alike, at most MAX_GROUPS groups: the peers
scale LeaderWorkerSets (LWS v0.8.0, size N) instead of Deployments (their tuned runs also
carry LWS's exclusive-topology annotation on the domain label: one group alone per domain),
ours an InferenceEndpoint of N workers per replica. A group serves once every member is
past its cold start; its leader exports its metrics (an LWS's scale selector reads the
leaders). Also reported: split group-seconds, a serving group's seconds with members in
more than one domain (its collectives would cross the domain's fabric; the simulation does
not slow it down for that).

Reported per trace and autoscaler: SLO-violation seconds (seconds when a new request would
wait more than SLO seconds), replica-seconds, scaling actions (changes of the desired
replicas, polled every second), and the first scale-up's latency (from the first second the
arrivals outran the serving capacity). Target (the issue's): fewer SLO-violation seconds
than both the HPA and KEDA at no more replica-seconds, on every trace kind.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from bench import harness
from bench.autoscaling import KINDS, MU, SLO, TARGET, trace
from bench.harness import cpu_seconds, rss_mb, wait_until
from bench.peers_placement import TRN2
from goodput_operator import names
from goodput_operator.sandbox import cluster, lws, scalers
from goodput_operator.sandbox.prometheus import Prometheus, serve_metrics
from goodput_operator.sandbox.versions import KEDA, KUBERNETES, LWS, PROMETHEUS_ADAPTER

Obj = dict[str, Any]
SCALERS = ("hpa", "hpa-tuned", "keda", "keda-tuned", "goodput")
PEERS = {"hpa": f"HPA (Kubernetes {KUBERNETES}) + prometheus-adapter {PROMETHEUS_ADAPTER}",
         "hpa-tuned": "the same, on the queue and the finished requests' rate",
         "keda": f"KEDA {KEDA}, defaults", "keda-tuned": f"KEDA {KEDA}, polling 5 s, two triggers",
         "goodput": "goodput InferenceEndpoint"}
MAX = 64
MAX_GROUPS = 12  # multi-node groups: the traces' peaks need 5-11 (seeds 7, 8)
GROUP_SPEEDUP = 8  # what a multi-node group serves, in single-node replicas
WARM = 90  # seconds of the warm load before the trace, past every rate window (1 min)
GROUP = "serving"
RESOURCE = TRN2.group.accelerator.resource
WAITING, RUNNING, FINISHED = ("vllm:num_requests_waiting", "vllm:num_requests_running",
                              "vllm:request_success_total")


def namespace_of(kind: str) -> str:
    return f"autoscale-{kind}"


@dataclass(frozen=True)
class Shape:
    """What one replica is: NODES pods of ACCELERATORS each, serving MU requests/s."""

    nodes: int = 1
    accelerators: int = 1
    mu: float = MU
    queued: float = TARGET  # the queue each replica is scaled to hold
    most: int = MAX  # replicas at most

    @property
    def grouped(self) -> bool:
        return self.nodes > 1

    @property
    def kind(self) -> str:
        """What the peers scale."""
        return "LeaderWorkerSet" if self.grouped else "Deployment"


SINGLE = Shape()


def group_shape(nodes: int) -> Shape:
    """A replica of NODES whole nodes (SINGLE for one)."""
    if nodes <= 1:
        return SINGLE
    return Shape(nodes, TRN2.group.accelerator.per_node, MU * GROUP_SPEEDUP,
                 TARGET * GROUP_SPEEDUP, MAX_GROUPS)


@dataclass
class Target:
    """One autoscaler's target on one trace: the simulated load and what was measured."""

    scaler: str
    kind: str
    rates: list[float]
    shape: Shape = SINGLE
    queue: float = 0.0
    violations: int = 0
    replica_seconds: float = 0.0
    actions: int = 0
    desired: int | None = None
    split_seconds: int = 0  # serving group-seconds with members in more than one domain
    need_at: float | None = None  # seconds into the trace: arrivals first outran capacity
    up_at: float | None = None  # seconds into the trace: the first scale-up seen
    exported: dict[str, tuple[float, float]] = field(default_factory=dict)  # pod: waiting, running
    finished: dict[str, float] = field(default_factory=dict)  # pod: requests finished
    # every 15 s of the trace: second, arrivals/s, desired, paid, serving, queue
    timeline: list[tuple[int, float, int | None, int, int, float]] = field(
        default_factory=list)

    @property
    def namespace(self) -> str:
        return namespace_of(self.kind)

    @property
    def warm_rate(self) -> float:
        """The load the target is warmed with: its trace's first minute, on average."""
        return statistics.fmean(self.rates[:60])

    @property
    def start(self) -> int:
        """Replicas at the trace's start: the warm load with 10% to spare (the tolerance)."""
        return max(2, math.ceil(self.warm_rate / (self.shape.mu * 0.9)))

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.scaler

    def row(self) -> Obj:
        latency = None if self.up_at is None or self.need_at is None else \
            round(max(0.0, self.up_at - self.need_at), 1)
        return {"trace": self.kind, "scaler": self.scaler, "slo_violation_s": self.violations,
                "replica_s": round(self.replica_seconds), "actions": self.actions,
                "first_scale_up_s": latency,
                **({"split_group_s": self.split_seconds} if self.shape.grouped else {})}


@dataclass
class Pod:
    target: tuple[str, str]
    group: str  # its replica: the pod itself, or its group's index
    leader: bool  # the one its group's metrics are exported on
    node: str | None = None
    bound_at: float | None = None  # monotonic, when first seen on a node
    deleting: bool = False

    @property
    def paid(self) -> bool:
        """On a node and not being deleted: its accelerator is paid for."""
        return self.bound_at is not None and not self.deleting

    def serving(self, now: float, cold_start: float) -> bool:
        """Paid, and its cold start is over."""
        return self.paid and now - (self.bound_at or now) >= cold_start


class Load:
    """The simulated serving load of every target, the pods it sees through one watch, and
    the metrics it serves to Prometheus."""

    def __init__(self, box: cluster.Sandbox, api: client.ApiClient, targets: list[Target],
                 cold_start: float, domains: dict[str, str]) -> None:
        self.box, self.api, self.targets, self.cold_start = box, api, targets, cold_start
        self.domains = domains  # node: its domain
        self.by_key = {t.key: t for t in targets}
        self.pods: dict[tuple[str, str], Pod] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.started: float | None = None  # monotonic, the trace's second 0
        threading.Thread(target=self._watch, daemon=True).start()
        threading.Thread(target=self._poll_desired, daemon=True).start()
        self.port = serve_metrics(lambda: self.exposition().encode())

    def target_of(self, pod: Any) -> tuple[str, str] | None:
        labels = pod.metadata.labels or {}
        name = labels.get(names.ENDPOINT_LABEL) or labels.get("app") or labels.get(lws.LWS_NAME)
        key = (pod.metadata.namespace, name)
        return key if key in self.by_key else None

    def _watch(self) -> None:
        """Every pod of the targets, from one list and watch (listed again after an error)."""
        core: Any = client.CoreV1Api(self.api)
        while not self.stopped.is_set():
            try:
                listed = core.list_pod_for_all_namespaces()
                with self.lock:  # pods still there keep when they were bound
                    there = {(p.metadata.namespace, p.metadata.name) for p in listed.items}
                    self.pods = {k: p for k, p in self.pods.items() if k in there}
                    for pod in listed.items:
                        self._seen(pod, gone=False)
                for event in watch.Watch().stream(  # type: ignore[no-untyped-call]
                        core.list_pod_for_all_namespaces, timeout_seconds=300,
                        resource_version=listed.metadata.resource_version):
                    with self.lock:
                        self._seen(event["object"], gone=event["type"] == "DELETED")
                    if self.stopped.is_set():
                        return
            except Exception as err:  # a watch that breaks is listed again
                print(f"# pod watch: {err!r}; listing again", file=sys.stderr, flush=True)
                time.sleep(1)

    def _seen(self, pod: Any, gone: bool) -> None:
        key = self.target_of(pod)
        if key is None:
            return
        ident = (pod.metadata.namespace, pod.metadata.name)
        if gone:
            self.pods.pop(ident, None)
            return
        labels = pod.metadata.labels or {}
        group = labels.get(lws.GROUP_INDEX) or labels.get(names.REPLICA_LABEL)
        member = labels.get(lws.WORKER_INDEX) or labels.get(names.MEMBER_LABEL) or "0"
        seen = self.pods.setdefault(ident, Pod(key, pod.metadata.name if group is None
                                               else f"group-{group}", member == "0"))
        if seen.bound_at is None and pod.spec.node_name:
            seen.bound_at, seen.node = time.monotonic(), pod.spec.node_name
        seen.deleting = pod.metadata.deletion_timestamp is not None

    def _poll_desired(self) -> None:
        """Each target's desired replicas every second: a change is a scaling action."""
        apps: Any = client.AppsV1Api(self.api)
        custom: Any = client.CustomObjectsApi(self.api)
        while not self.stopped.is_set():
            desired: dict[tuple[str, str], int] = {}
            try:
                for d in apps.list_deployment_for_all_namespaces().items:
                    desired[(d.metadata.namespace, d.metadata.name)] = d.spec.replicas or 0
                if any(t.shape.grouped for t in self.targets) and lws.running(self.box):
                    for s in custom.list_cluster_custom_object(
                            "leaderworkerset.x-k8s.io", "v1", "leaderworkersets")["items"]:
                        desired[(s["metadata"]["namespace"], s["metadata"]["name"])] = \
                            s["spec"].get("replicas", 1)
                for e in custom.list_cluster_custom_object(
                        "goodput.dev", "v1alpha1", "inferenceendpoints")["items"]:
                    got = (e.get("status") or {}).get("desiredReplicas")
                    if got is not None:
                        desired[(e["metadata"]["namespace"], e["metadata"]["name"])] = got
            except Exception as err:  # polled again a second later
                print(f"# desired replicas: {err!r}", file=sys.stderr, flush=True)
            with self.lock:
                now = None if self.started is None else time.monotonic() - self.started
                for key, count in desired.items():
                    target = self.by_key.get(key)
                    if target is None:
                        continue
                    if now is not None and target.desired is not None and \
                            count != target.desired:
                        target.actions += 1
                        if count > target.desired and target.up_at is None:
                            target.up_at = now
                    target.desired = count
            time.sleep(1)

    def groups(self, target: Target, now: float) -> tuple[int, list[str], list[set[str]]]:
        """TARGET's paid pods, and its serving groups: each one's leader, and the domains
        its members are on. A group serves once all its members are past their cold start."""
        members: dict[str, list[tuple[str, Pod]]] = {}
        paid = 0
        for (_, name), pod in self.pods.items():
            if pod.target == target.key and pod.paid:
                paid += 1
                members.setdefault(pod.group, []).append((name, pod))
        leaders, domains = [], []
        for group in members.values():
            if len(group) == target.shape.nodes and \
                    all(p.serving(now, self.cold_start) for _, p in group):
                leaders.append(next((name for name, p in group if p.leader), group[0][0]))
                domains.append({self.domains.get(p.node or "", "") for _, p in group})
        return paid, leaders, domains

    def step(self, second: int | None, warm: bool = True) -> None:
        """One second of every target's load: SECOND of its trace, or (None) its warm load
        if WARM, else none."""
        now = time.monotonic()
        with self.lock:
            for target in self.targets:
                paid, serving, domains = self.groups(target, now)
                arrivals = target.rates[second] if second is not None else \
                    target.warm_rate if warm else 0.0
                capacity = len(serving) * target.shape.mu
                served = min(target.queue + arrivals, capacity)
                target.queue += arrivals - served
                if second is not None:
                    if arrivals > capacity and target.need_at is None:
                        target.need_at = float(second)
                    if not serving or target.queue / capacity > SLO:
                        target.violations += 1
                    target.replica_seconds += paid / target.shape.nodes
                    target.split_seconds += sum(1 for d in domains if len(d) > 1)
                    if second % 15 == 0:
                        target.timeline.append((second, round(arrivals, 1), target.desired,
                                                paid, len(serving), round(target.queue)))
                each = (target.queue / len(serving), served / len(serving)) if serving else (0, 0)
                target.exported = dict.fromkeys(serving, each)
                for name in serving:
                    target.finished[name] = target.finished.get(name, 0.0) + served / len(serving)
                target.finished = {n: c for n, c in target.finished.items() if n in serving
                                   or (target.namespace, n) in self.pods}

    def exposition(self) -> str:
        """What each serving pod's vLLM would export, in Prometheus' text format."""
        lines = [f"# TYPE {WAITING} gauge", f"# TYPE {RUNNING} gauge",
                 f"# TYPE {FINISHED} counter"]
        with self.lock:
            for target in self.targets:
                for pod, (waiting, running) in target.exported.items():
                    labels = (f'namespace="{target.namespace}",endpoint="{target.scaler}",'
                              f'pod="{pod}"')
                    lines += [f"{WAITING}{{{labels}}} {waiting}",
                              f"{RUNNING}{{{labels}}} {running}",
                              f"{FINISHED}{{{labels}}} {target.finished.get(pod, 0.0)}"]
        return "\n".join(lines) + "\n"

    def serving(self, target: Target) -> int:
        """TARGET's serving replicas (groups)."""
        with self.lock:
            return len(self.groups(target, time.monotonic())[1])


def pod_template(name: str, shape: Shape) -> Obj:
    resources = {RESOURCE: str(shape.accelerators)}
    return {"metadata": {"labels": {"app": name}},
            "spec": {"nodeSelector": TRN2.spec["nodeSelector"],
                     "containers": [{"name": "server", "image": "vllm:1",
                                     "resources": {"requests": resources,
                                                   "limits": resources}}]}}


def workload(target: Target, replicas: int) -> Obj:
    """What a peer scales: a Deployment of single-node replicas, or a LeaderWorkerSet of
    groups (tuned: one group alone per domain, LWS's exclusive topology)."""
    name, ns, shape = target.scaler, target.namespace, target.shape
    if shape.grouped:
        return lws.leader_worker_set(
            name, ns, replicas, shape.nodes, pod_template(name, shape),
            TRN2.group.domain_key if name.endswith("-tuned") else None)
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": pod_template(name, shape)}}


def endpoint(namespace: str, minimum: int, shape: Shape = SINGLE, lookahead: int = 0) -> Obj:
    """Ours: bench/autoscaling.py's configuration, replicas of SHAPE, the trends judged
    LOOKAHEAD seconds ahead (scaling.lookaheadSeconds; 0: off, the default)."""
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "InferenceEndpoint",
            "metadata": {"name": "goodput", "namespace": namespace},
            "spec": {"ultraServerGroup": GROUP, "model": {"name": "llama"},
                     "replicaShape": {"workers": shape.nodes,
                                      "acceleratorsPerWorker": shape.accelerators},
                     "template": {"spec": {"containers": [{"name": "server",
                                                           "image": "vllm:1"}]}},
                     "scaling": {"minReplicas": minimum, "maxReplicas": shape.most,
                                 "tolerance": 0.1, "intervalSeconds": 15,
                                 "metrics": [{"type": "RequestRate", "target": shape.mu},
                                             {"type": "QueueDepth", "target": shape.queued}],
                                 "scaleUp": {"stabilizationSeconds": 0},
                                 "scaleDown": {"stabilizationSeconds": 300},
                                 "panic": {"enabled": True, "threshold": 2},
                                 "lookaheadSeconds": lookahead}}}


def scaler_objects(target: Target, prometheus: str, minimum: int, lookahead: int = 0
                   ) -> list[Obj]:
    """What TARGET's autoscaler is given, at MINIMUM replicas (ours: LOOKAHEAD, `endpoint`)."""
    name, ns, shape = target.scaler, target.namespace, target.shape
    selector = f'{{namespace="{ns}",endpoint="{name}"}}'
    if name == "goodput":
        return [endpoint(ns, minimum, shape, lookahead)]
    tuned = name.endswith("-tuned")  # a second metric: the finished requests' rate
    if name.startswith("hpa"):
        metrics = {WAITING.replace(":", "_"): shape.queued}
        if tuned:
            metrics["vllm_request_success_per_second"] = shape.mu
        return [scalers.hpa(name, ns, metrics, shape.most, minimum, shape.kind)]
    queries = {f"sum({WAITING}{selector})": shape.queued}
    if tuned:
        queries[f"sum(rate({FINISHED}{selector}[1m]))"] = shape.mu
    return [scalers.scaled_object(name, ns, prometheus, queries, shape.most, minimum,
                                  polling_seconds=5 if tuned else None, kind=shape.kind)]


def fleet_domains(targets: list[Target]) -> int:
    """Domains enough for every target at its most replicas at once, twice over for
    single-node replicas, so that no scaler waits for another's nodes (an exclusive LWS
    group holds a whole domain)."""
    per_domain = TRN2.group.nodes_per_domain
    nodes = 0
    for t in targets:
        if not t.shape.grouped:
            nodes += math.ceil(t.shape.most * 2 / TRN2.group.accelerator.per_node)
        elif t.scaler.endswith("-tuned"):
            nodes += t.shape.most * per_domain * math.ceil(t.shape.nodes / per_domain)
        else:
            nodes += t.shape.most * t.shape.nodes
    return math.ceil(nodes / per_domain)


def run(args: argparse.Namespace) -> Obj:
    kinds = [k for k in args.traces.split(",") if k]
    chosen = [s for s in args.scalers.split(",") if s]
    shape = group_shape(args.group_nodes)
    targets = [Target(s, k, trace(args.minutes, args.seed, k), shape)
               for k in kinds for s in chosen]
    domains = fleet_domains(targets)
    group = {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
             "metadata": {"name": GROUP}, "spec": {**TRN2.spec, "probes": {"schedule": ""}}}
    with harness.sandbox("bench-autoscaling-peers", f"synthetic:trn2:{domains}", group,
                         namespaces=[namespace_of(k) for k in kinds]) as box:
        api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(box.kubeconfig))
        nodes: Any = client.CoreV1Api(api).list_node().items
        load = Load(box, api, targets, args.cold_start,
                    {n.metadata.name: (n.metadata.labels or {}).get(TRN2.group.domain_key, "")
                     for n in nodes})
        shutil.rmtree(Path(box.home) / "prometheus", ignore_errors=True)  # an earlier run's
        prometheus = Prometheus(Path(box.home) / "prometheus",
                                [Prometheus.job("servers", f"127.0.0.1:{load.port}")])
        prometheus.start()
        processes: dict[str, int] = {}
        operator = harness.OperatorProcess(box, Path(box.home) / "operator.log")
        try:
            if shape.grouped and any(s != "goodput" for s in chosen):
                lws.start(box)
                processes["lws"] = int(lws.pidfile(box).read_text())
            if any(s.startswith("hpa") for s in chosen):
                scalers.start_adapter(box, prometheus.url)
                processes["prometheus-adapter"] = scalers.pid(box, "prometheus-adapter")
            if any(s.startswith("keda") for s in chosen):
                scalers.start_keda(box)
                processes |= {n: scalers.pid(box, n) for n in ("keda-operator", "keda-adapter")}
            if "goodput" in chosen:
                os.environ["GOODPUT_PROMETHEUS_URL"] = prometheus.url
                operator.start()
                wait_until(operator.ready, 120, "operator ready")
                processes["goodput operator"] = operator.pid
            return replay(box, load, targets, prometheus.url, processes, args.lookahead)
        finally:
            load.stopped.set()
            operator.stop()
            scalers.stop(box)
            lws.stop(box)
            prometheus.stop()


def replay(box: cluster.Sandbox, load: Load, targets: list[Target], prometheus: str,
           processes: dict[str, int], lookahead: int = 0) -> Obj:
    """Warm every target: its starting replicas serving its trace's first-minute load for
    WARM seconds (every rate window full), then play the traces second by second."""
    box.apply(*(workload(t, t.start) for t in targets if t.scaler != "goodput"))
    box.apply(*(o for t in targets for o in scaler_objects(t, prometheus, t.start, lookahead)))
    began = time.monotonic()
    while not all(load.serving(t) >= t.start for t in targets):
        if time.monotonic() - began > 300:
            raise RuntimeError("targets not serving their replicas after 300 s: " + ", ".join(
                f"{t.namespace}/{t.scaler}={load.serving(t)}/{t.start}" for t in targets))
        load.step(None, warm=False)
        time.sleep(1)
    for second in range(WARM):
        load.step(None)
        if second % 15 == 0:
            print("# warm: " + ", ".join(f"{t.kind}/{t.scaler} {load.serving(t)} serving, "
                                         f"queue {t.queue:.0f}" for t in targets),
                  file=sys.stderr, flush=True)
        time.sleep(1)
    print(f"# every target serves its starting replicas, warm ({time.monotonic() - began:.0f}"
          f" s); replaying {len(targets[0].rates)} s", file=sys.stderr, flush=True)
    box.apply(*(o for t in targets for o in scaler_objects(t, prometheus, 1, lookahead)))
    cpu = {name: cpu_seconds(pid) for name, pid in processes.items()}
    load.started = time.monotonic()
    seconds = len(targets[0].rates)
    for second in range(seconds):
        load.step(second)
        if second % 60 == 0:
            print(f"# {second // 60} min: " + ", ".join(
                f"{t.kind}/{t.scaler} {t.desired}" for t in targets), file=sys.stderr, flush=True)
        time.sleep(max(0.0, load.started + second + 1 - time.monotonic()))
    decisions = {f"{t.kind}/goodput": (json.loads(box.kubectl(
        "get", "inferenceendpoint", "goodput", "-n", t.namespace, "-o", "json").stdout)
        .get("status") or {}).get("recentScaling") for t in targets if t.scaler == "goodput"}
    return {"rows": [t.row() for t in targets], "goodput_decisions": decisions,
            "timelines": {f"{t.kind}/{t.scaler}": t.timeline for t in targets},
            "controllers": {name: {"cpu_s": round(cpu_seconds(pid) - cpu[name], 1),
                                   "peak_rss_mib": round(rss_mb(pid)[1])}
                            for name, pid in processes.items()}}


def met(rows: list[Obj], kind: str) -> bool:
    """Ours has fewer SLO-violation seconds than the HPA and KEDA (defaults) on KIND's
    trace, at no more replica-seconds than either (or none where neither has any)."""
    by = {r["scaler"]: r for r in rows if r["trace"] == kind}
    ours = by.get("goodput")
    if ours is None:
        return False
    peers = [by[s] for s in ("hpa", "keda") if s in by]
    return all((ours["slo_violation_s"] < p["slo_violation_s"] or
                ours["slo_violation_s"] == p["slo_violation_s"] == 0) and
               ours["replica_s"] <= p["replica_s"] for p in peers)


def report(result: Obj, args: argparse.Namespace) -> None:
    shape = group_shape(args.group_nodes)
    print(f"Autoscaling head to head: {args.minutes} min per trace (seed {args.seed}), "
          f"cold start {args.cold_start:g} s, {shape.mu:g} req/s per replica "
          f"({shape.nodes} node(s) of {shape.accelerators} accelerator(s)), SLO {SLO:g} s"
          + (f"; the peers scale LeaderWorkerSets (LWS {LWS})" if shape.grouped else "")
          + (f"; ours with lookaheadSeconds {args.lookahead}" if args.lookahead else ""))
    for scaler in dict.fromkeys(r["scaler"] for r in result["rows"]):
        print(f"  {scaler}: {PEERS[scaler]}")
    split = "split group-s | " if shape.grouped else ""
    print("\n| trace | autoscaler | SLO-violation s | replica-s | actions | first scale-up s "
          f"| {split}ours / it: violation s, replica-s |")
    print("|---|---|---|---|---|---|---|" + ("---|" if shape.grouped else ""))
    for row in result["rows"]:
        ours = next((r for r in result["rows"] if r["trace"] == row["trace"] and
                     r["scaler"] == "goodput"), None)
        ratios = "" if ours is None or row is ours else (
            f"{ours['slo_violation_s'] / max(row['slo_violation_s'], 1):.2f}x, "
            f"{ours['replica_s'] / max(row['replica_s'], 1):.2f}x")
        print(f"| {row['trace']} | {row['scaler']} | {row['slo_violation_s']} | "
              f"{row['replica_s']} | {row['actions']} | {row['first_scale_up_s']} | "
              + (f"{row['split_group_s']} | " if shape.grouped else "") + f"{ratios} |")
    print("\n| controller | CPU s over the traces | peak RSS MiB |\n|---|---|---|")
    for name, figures in result["controllers"].items():
        print(f"| {name} | {figures['cpu_s']} | {figures['peak_rss_mib']} |")
    for kind in dict.fromkeys(r["trace"] for r in result["rows"]):
        print(f"target on {kind} (fewer violation s than the HPA and KEDA at no more "
              f"replica-s): {'met' if met(result['rows'], kind) else 'NOT met'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--traces", default=",".join(KINDS))
    parser.add_argument("--scalers", default=",".join(SCALERS))
    parser.add_argument("--cold-start", type=float, default=60)
    parser.add_argument("--group-nodes", type=int, default=1,
                        help="nodes per replica (default 1); more: multi-node groups, the "
                             "peers on LeaderWorkerSets")
    parser.add_argument("--lookahead", type=int, default=0,
                        help="our scaling.lookaheadSeconds (default 0: off)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if unknown := {k for k in args.traces.split(",") if k} - set(KINDS):
        parser.error(f"unknown trace kind(s): {', '.join(sorted(unknown))}")
    if unknown := {s for s in args.scalers.split(",") if s} - set(SCALERS):
        parser.error(f"unknown autoscaler(s): {', '.join(sorted(unknown))}")
    result = run(args)
    report(result, args)
    if args.json:
        print(json.dumps({**result, "minutes": args.minutes, "seed": args.seed,
                          "cold_start_s": args.cold_start, "group_nodes": args.group_nodes,
                          "lookahead_s": args.lookahead,
                          "met": {k: met(result["rows"], k)
                                  for k in dict.fromkeys(r["trace"] for r in result["rows"])}},
                         indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
