"""Autoscaling, head to head with the real HPA (through prometheus-adapter) and KEDA
(issue 46; ../shared/design/PEERS.md): the same load traces, in real time, on one KWOK fleet.

    python -m bench.autoscaling_peers [--json] [--minutes N] [--seed S]
                                      [--traces bursty,diurnal,flash]
                                      [--scalers hpa,hpa-tuned,keda,keda-tuned,goodput]
                                      [--cold-start S]

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
  same Prometheus by the operator's default vLLM queries.

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
from goodput_operator.sandbox import cluster, scalers
from goodput_operator.sandbox.prometheus import Prometheus, serve_metrics
from goodput_operator.sandbox.versions import KEDA, KUBERNETES, PROMETHEUS_ADAPTER

Obj = dict[str, Any]
SCALERS = ("hpa", "hpa-tuned", "keda", "keda-tuned", "goodput")
PEERS = {"hpa": f"HPA (Kubernetes {KUBERNETES}) + prometheus-adapter {PROMETHEUS_ADAPTER}",
         "hpa-tuned": "the same, on the queue and the finished requests' rate",
         "keda": f"KEDA {KEDA}, defaults", "keda-tuned": f"KEDA {KEDA}, polling 5 s, two triggers",
         "goodput": "goodput InferenceEndpoint"}
MAX = 64
WARM = 90  # seconds of the warm load before the trace, past every rate window (1 min)
GROUP = "serving"
RESOURCE = TRN2.group.accelerator.resource
WAITING, RUNNING, FINISHED = ("vllm:num_requests_waiting", "vllm:num_requests_running",
                              "vllm:request_success_total")


def namespace_of(kind: str) -> str:
    return f"autoscale-{kind}"


@dataclass
class Target:
    """One autoscaler's target on one trace: the simulated load and what was measured."""

    scaler: str
    kind: str
    rates: list[float]
    queue: float = 0.0
    violations: int = 0
    replica_seconds: float = 0.0
    actions: int = 0
    desired: int | None = None
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
        return max(2, math.ceil(self.warm_rate / (MU * 0.9)))

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.scaler

    def row(self) -> Obj:
        latency = None if self.up_at is None or self.need_at is None else \
            round(max(0.0, self.up_at - self.need_at), 1)
        return {"trace": self.kind, "scaler": self.scaler, "slo_violation_s": self.violations,
                "replica_s": round(self.replica_seconds), "actions": self.actions,
                "first_scale_up_s": latency}


@dataclass
class Pod:
    target: tuple[str, str]
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

    def __init__(self, api: client.ApiClient, targets: list[Target], cold_start: float) -> None:
        self.api, self.targets, self.cold_start = api, targets, cold_start
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
        name = labels.get(names.ENDPOINT_LABEL) or labels.get("app")
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
        seen = self.pods.setdefault(ident, Pod(key))
        if seen.bound_at is None and pod.spec.node_name:
            seen.bound_at = time.monotonic()
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

    def step(self, second: int | None, warm: bool = True) -> None:
        """One second of every target's load: SECOND of its trace, or (None) its warm load
        if WARM, else none."""
        now = time.monotonic()
        with self.lock:
            for target in self.targets:
                pods = {name: p for (_, name), p in self.pods.items()
                        if p.target == target.key and p.paid}
                serving = [name for name, p in pods.items() if p.serving(now, self.cold_start)]
                arrivals = target.rates[second] if second is not None else \
                    target.warm_rate if warm else 0.0
                capacity = len(serving) * MU
                served = min(target.queue + arrivals, capacity)
                target.queue += arrivals - served
                if second is not None:
                    if arrivals > capacity and target.need_at is None:
                        target.need_at = float(second)
                    if not serving or target.queue / capacity > SLO:
                        target.violations += 1
                    target.replica_seconds += len(pods)
                    if second % 15 == 0:
                        target.timeline.append((second, round(arrivals, 1), target.desired,
                                                len(pods), len(serving), round(target.queue)))
                each = (target.queue / len(serving), served / len(serving)) if serving else (0, 0)
                target.exported = dict.fromkeys(serving, each)
                for name in serving:
                    target.finished[name] = target.finished.get(name, 0.0) + served / len(serving)
                target.finished = {n: c for n, c in target.finished.items() if n in pods}

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
        now = time.monotonic()
        with self.lock:
            return sum(1 for p in self.pods.values()
                       if p.target == target.key and p.serving(now, self.cold_start))


def deployment(name: str, namespace: str, replicas: int) -> Obj:
    resources = {RESOURCE: "1"}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"nodeSelector": TRN2.spec["nodeSelector"],
                                           "containers": [{"name": "server", "image": "vllm:1",
                                                           "resources": {
                                                               "requests": resources,
                                                               "limits": resources}}]}}}}


def endpoint(namespace: str, minimum: int) -> Obj:
    """Ours: bench/autoscaling.py's configuration, one accelerator per replica."""
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "InferenceEndpoint",
            "metadata": {"name": "goodput", "namespace": namespace},
            "spec": {"ultraServerGroup": GROUP, "model": {"name": "llama"},
                     "replicaShape": {"workers": 1, "acceleratorsPerWorker": 1},
                     "template": {"spec": {"containers": [{"name": "server",
                                                           "image": "vllm:1"}]}},
                     "scaling": {"minReplicas": minimum, "maxReplicas": MAX,
                                 "tolerance": 0.1, "intervalSeconds": 15,
                                 "metrics": [{"type": "RequestRate", "target": MU},
                                             {"type": "QueueDepth", "target": TARGET}],
                                 "scaleUp": {"stabilizationSeconds": 0},
                                 "scaleDown": {"stabilizationSeconds": 300},
                                 "panic": {"enabled": True, "threshold": 2}}}}


def scaler_objects(target: Target, prometheus: str, minimum: int) -> list[Obj]:
    """What TARGET's autoscaler is given, at MINIMUM replicas."""
    name, ns = target.scaler, target.namespace
    selector = f'{{namespace="{ns}",endpoint="{name}"}}'
    if name == "goodput":
        return [endpoint(ns, minimum)]
    tuned = name.endswith("-tuned")  # a second metric: the finished requests' rate
    if name.startswith("hpa"):
        metrics = {WAITING.replace(":", "_"): TARGET}
        if tuned:
            metrics["vllm_request_success_per_second"] = MU
        return [scalers.hpa(name, ns, metrics, MAX, minimum)]
    queries = {f"sum({WAITING}{selector})": TARGET}
    if tuned:
        queries[f"sum(rate({FINISHED}{selector}[1m]))"] = MU
    return [scalers.scaled_object(name, ns, prometheus, queries, MAX, minimum,
                                  polling_seconds=5 if tuned else None)]


def run(args: argparse.Namespace) -> Obj:
    kinds = [k for k in args.traces.split(",") if k]
    chosen = [s for s in args.scalers.split(",") if s]
    targets = [Target(s, k, trace(args.minutes, args.seed, k)) for k in kinds for s in chosen]
    domains = math.ceil(len(targets) * MAX * 2 / (TRN2.group.nodes_per_domain * 16))
    group = {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
             "metadata": {"name": GROUP}, "spec": {**TRN2.spec, "probes": {"schedule": ""}}}
    with harness.sandbox("bench-autoscaling-peers", f"synthetic:trn2:{domains}", group,
                         namespaces=[namespace_of(k) for k in kinds]) as box:
        api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(box.kubeconfig))
        load = Load(api, targets, args.cold_start)
        shutil.rmtree(Path(box.home) / "prometheus", ignore_errors=True)  # an earlier run's
        prometheus = Prometheus(Path(box.home) / "prometheus",
                                [Prometheus.job("servers", f"127.0.0.1:{load.port}")])
        prometheus.start()
        processes: dict[str, int] = {}
        operator = harness.OperatorProcess(box, Path(box.home) / "operator.log")
        try:
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
            return replay(box, load, targets, prometheus.url, processes)
        finally:
            load.stopped.set()
            operator.stop()
            scalers.stop(box)
            prometheus.stop()


def replay(box: cluster.Sandbox, load: Load, targets: list[Target], prometheus: str,
           processes: dict[str, int]) -> Obj:
    """Warm every target: its starting replicas serving its trace's first-minute load for
    WARM seconds (every rate window full), then play the traces second by second."""
    box.apply(*(deployment(t.scaler, t.namespace, t.start) for t in targets
                if t.scaler != "goodput"))
    box.apply(*(o for t in targets for o in scaler_objects(t, prometheus, t.start)))
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
    box.apply(*(o for t in targets for o in scaler_objects(t, prometheus, 1)))
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
    print(f"Autoscaling head to head: {args.minutes} min per trace (seed {args.seed}), "
          f"cold start {args.cold_start:g} s, MU {MU:g} req/s per replica, SLO {SLO:g} s")
    for scaler in dict.fromkeys(r["scaler"] for r in result["rows"]):
        print(f"  {scaler}: {PEERS[scaler]}")
    print("\n| trace | autoscaler | SLO-violation s | replica-s | actions | first scale-up s "
          "| ours / it: violation s, replica-s |")
    print("|---|---|---|---|---|---|---|")
    for row in result["rows"]:
        ours = next((r for r in result["rows"] if r["trace"] == row["trace"] and
                     r["scaler"] == "goodput"), None)
        ratios = "" if ours is None or row is ours else (
            f"{ours['slo_violation_s'] / max(row['slo_violation_s'], 1):.2f}x, "
            f"{ours['replica_s'] / max(row['replica_s'], 1):.2f}x")
        print(f"| {row['trace']} | {row['scaler']} | {row['slo_violation_s']} | "
              f"{row['replica_s']} | {row['actions']} | {row['first_scale_up_s']} | {ratios} |")
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
                          "cold_start_s": args.cold_start,
                          "met": {k: met(result["rows"], k)
                                  for k in dict.fromkeys(r["trace"] for r in result["rows"])}},
                         indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
