"""Scale benchmark: the operator on a large simulated fleet.

    python -m bench.scale [--quick] [--json] [--domains N] [--jobs J] [--endpoints E]
                          [--replicas R] [--namespaces N]

On a sandbox with a synthetic Trn2 fleet (default 500 UltraServers = 2,000 nodes), apply J
TrainingJobs (4 workers x 16 chips, one UltraServer each; default 200) and E
InferenceEndpoints (R replicas of one worker x 2 chips; default 500 x 18), about 10k pods,
and measure:
- time until every job runs, then (endpoints applied after) until every endpoint has all
  its replicas ready;
- a node failure's detection and new placement (`node_failure`, TRIALS times, each on
  another job) on the fleet with only the jobs running, and again during the endpoints'
  rollout, the trials spaced at random (target, issue 22: within 2x the first);
- the operator's memory (RSS, peak), against kube-controller-manager and kube-scheduler
  measured in the same run (Go controllers caching the same pods and nodes);
- reconcile latency p50/p99: one object's (its API writes, as controller-runtime's
  reconcile time) and one pass's (every group, job and endpoint: the longest a change
  waits), from the operator's histograms; the pass against the same on the idle fleet;
- API requests per second the operator sends (its own counter; kopf's watches excluded);
- an operator restart: time to ready and to its first full pass, and how many jobs it
  restarted (must be 0: it continues from what the API server holds).
Targets (issue 9): RSS <= 400 MB, p99 reconcile <= 2 s.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import watch

from bench.harness import OperatorProcess, rss_mb, sandbox, wait_until
from bench.recovery import Bench, quarantined, replaced
from goodput_operator.sandbox import cluster, faults
from goodput_operator.topology.record import ranks_of

NAME = "bench-scale"
NAMESPACE = "scale"
GROUP = {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
         "metadata": {"name": "scale-trn2"},
         "spec": {"nodeSelector": {"node.kubernetes.io/instance-type": "trn2u.48xlarge"},
                  "domainLabel": "topology.k8s.aws/ultraserver-id",
                  "networkLevels": ["topology.k8s.aws/network-node-layer-1",
                                    "topology.k8s.aws/network-node-layer-2"],
                  "accelerator": {"resource": "aws.amazon.com/neuron", "perNode": 16},
                  "nodesPerDomain": 4, "probes": {"schedule": ""},
                  # KWOK renews 2,000 simulated Leases in bursts, up to 140 s late on this
                  # shared machine under load (a kubelet renews every 10 s on its own):
                  # Lease silence would quarantine healthy simulated nodes mid-run
                  "quarantine": {"leaseSilenceSeconds": 0}}}
TEMPLATE = {"spec": {"containers": [{"name": "main", "image": "example.com/app:1"}]}}
PASS = "goodput_reconcile_pass_seconds"
TRIALS = 5  # node failures on the fleet with only the jobs, and again during the rollout
OBJECT = "goodput_reconcile_seconds"


def training_job(index: int) -> dict[str, Any]:
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": f"tj-{index:04d}", "namespace": NAMESPACE},
            "spec": {"ultraServerGroup": "scale-trn2", "workers": 4,
                     "acceleratorsPerWorker": 16, "template": TEMPLATE}}


def endpoint_namespace(index: int, namespaces: int) -> str:
    """The endpoints' namespaces: NAMESPACE, or NAMESPACE-0.. in turn."""
    return NAMESPACE if namespaces <= 1 else f"{NAMESPACE}-{index % namespaces}"


def endpoint(index: int, replicas: int, namespaces: int = 1) -> dict[str, Any]:
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "InferenceEndpoint",
            "metadata": {"name": f"ie-{index:04d}",
                         "namespace": endpoint_namespace(index, namespaces)},
            "spec": {"ultraServerGroup": "scale-trn2", "model": {"name": f"m-{index}"},
                     "replicaShape": {"workers": 1, "acceleratorsPerWorker": 2},
                     "replicas": replicas, "template": TEMPLATE}}


def apply_all(box: cluster.Sandbox, objects: list[dict[str, Any]]) -> None:
    for start in range(0, len(objects), 100):
        box.apply(*objects[start:start + 100], timeout=300)


def listed(box: cluster.Sandbox, plural: str) -> list[dict[str, Any]]:
    out = box.kubectl("get", plural, "-A", "-o", "json", timeout=300)
    return list(json.loads(out.stdout)["items"])


def all_running(box: cluster.Sandbox, jobs: int, endpoints: int, replicas: int
                ) -> tuple[int, int]:
    running = sum(1 for j in listed(box, "trainingjobs")
                  if (j.get("status") or {}).get("phase") == "Running")
    full = sum(1 for e in listed(box, "inferenceendpoints")
               if (e.get("status") or {}).get("readyReplicas", 0) >= replicas)
    return running, full


def quantile(buckets: dict[float, float], q: float) -> float:
    """histogram_quantile over cumulative BUCKETS {upper bound: count}, as Prometheus does."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total == 0:
        return 0.0
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            if bound == float("inf"):
                return lower
            width = buckets[bound] - below
            return lower + (bound - lower) * ((rank - below) / width if width else 1.0)
        lower, below = bound, buckets[bound]
    return lower


def pass_buckets(samples: dict[str, float], metric: str = PASS) -> dict[float, float]:
    """METRIC's cumulative buckets, summed over its other labels (e.g. kind)."""
    found: dict[float, float] = {}
    for key, value in samples.items():
        if key.startswith(f"{metric}_bucket{{"):
            bound = float(key.split('le="', 1)[1].split('"', 1)[0])
            found[bound] = found.get(bound, 0.0) + value
    return found


def minus(after: dict[float, float], before: dict[float, float]) -> dict[float, float]:
    return {bound: count - before.get(bound, 0.0) for bound, count in after.items()}


def api_requests(samples: dict[str, float]) -> float:
    return sum(v for k, v in samples.items() if k.startswith("goodput_api_requests_total"))


CALLS = "goodput_api_request_seconds"


def api_calls(after: dict[str, float], before: dict[str, float], top: int = 6
              ) -> dict[str, dict[str, float]]:
    """The operator's API calls between two scrapes, by method and resource: how many, and
    how long the API server took for each on average; the TOP most time-consuming, so a
    slow rollout shows which calls it waits on."""
    found: dict[str, dict[str, float]] = {}
    for key, value in after.items():
        if not key.startswith(f"{CALLS}_count{{"):
            continue
        labels = dict(part.split("=", 1) for part in key[key.index("{") + 1:-1].split(","))
        method, resource = (labels[name].strip('"') for name in ("method", "resource"))
        call = f"{method} {resource}"
        count = value - before.get(key, 0.0)
        total = after[key.replace("_count{", "_sum{")] - before.get(
            key.replace("_count{", "_sum{"), 0.0)
        if count > 0:
            found[call] = {"count": int(count), "mean_ms": round(1000 * total / count, 1),
                           "seconds": round(total, 1)}
    return dict(sorted(found.items(), key=lambda item: -item[1]["seconds"])[:top])


class Sightings:
    """Watch streams on one node and one job, open before a fault is injected: each mark is
    the moment its event arrived from the API server (no poll interval, and no client
    process started on the two loaded cores between a change and its sighting). Marks:
    `detected`, the node's quarantine label; `replaced`, the job's RESTART with a
    placement."""

    def __init__(self, watched: Bench, node: str, restart: int) -> None:
        self.marks: dict[str, float] = {}
        self._live = {"detected": threading.Event(), "replaced": threading.Event()}
        follow = [
            ("detected", watched.core.list_node, (), quarantined, node),
            ("replaced", watched.custom.list_namespaced_custom_object,
             ("goodput.dev", "v1alpha1", watched.namespace, "trainingjobs"),
             lambda job: replaced(job, restart), watched.name)]
        for mark, call, args, seen, name in follow:
            threading.Thread(target=self._follow, args=(mark, call, args, seen, name),
                             daemon=True).start()
        for mark, live in self._live.items():
            if not live.wait(60):
                raise RuntimeError(f"no watch for {mark} within 60 s")

    def _follow(self, mark: str, call: Any, args: tuple[Any, ...], seen: Any,
                name: str) -> None:
        stream = watch.Watch()  # type: ignore[no-untyped-call]
        for event in stream.stream(  # type: ignore[no-untyped-call]
                call, *args, field_selector=f"metadata.name={name}", timeout_seconds=300):
            self._live[mark].set()  # the first event is the object as it is now
            if seen(event["raw_object"]):
                self.marks.setdefault(mark, time.monotonic())
                break
        stream.stop()  # type: ignore[no-untyped-call]

    def wait(self, timeout: float) -> dict[str, float]:
        deadline = time.monotonic() + timeout
        while len(self.marks) < len(self._live):
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {sorted(self.marks)} within {timeout} s")
            time.sleep(0.01)
        return self.marks


def node_failure(box: cluster.Sandbox, job: str) -> dict[str, float]:
    """Fail the node of JOB's rank 1 with a health agent's signal (a condition, counted at
    once: no NotReady grace period), written by this process's client, and time from
    outside, by watch streams, the quarantine (detection) and the job's new placement for
    its next restart (on a whole free UltraServer: the job fills its own). RECORDED: the
    same span as the job's incident record says it (the failure's time on the node's
    condition, whole seconds, to the operator's new placement), free of the API server's
    latency under load. KUBECTL_S: what one kubectl call took just before (runs before
    2026-11-28's later ones injected with two, after starting the clock)."""
    watched = Bench(box, job, workers=4, namespace=NAMESPACE)
    ranks = {r["rank"]: r["node"] for r in ranks_of(watched.job()["status"]["placement"])}
    started = time.monotonic()
    box.kubectl("get", "node", ranks[1], "-o", "name")
    kubectl_s = time.monotonic() - started
    sightings = Sightings(watched, ranks[1], restart=1)
    condition = faults.SIGNALS["accelerated-hardware"].condition
    assert condition is not None  # the signal is a condition
    kind, failed, _ = condition
    t0 = time.monotonic()
    watched.core.patch_node_status(
        ranks[1], faults.condition_patch(kind, failed, "SimulatedFailure", "node failed "
                                         "(injected by bench.scale)"),
        _content_type="application/strategic-merge-patch+json")
    marks = sightings.wait(300)
    incident = (watched.job()["status"].get("incidents") or [{}])[-1]
    return {"detection_s": round(marks["detected"] - t0, 2),
            "placement_s": round(marks["replaced"] - marks["detected"], 2),
            "total_s": round(marks["replaced"] - t0, 2),
            "recorded_s": round(recorded(incident), 2),
            "kubectl_s": round(kubectl_s, 2)}


def recorded(incident: dict[str, Any]) -> float:
    """Detection plus replacement as an incident record says them (NaN when it lacks
    either; 0 is a figure: a spare decided in the pass that quarantined)."""
    spans = [incident.get(key) for key in ("detectionSeconds", "replacementSeconds")]
    return math.fsum(float(span) for span in spans if span is not None) \
        if None not in spans else math.nan


def failures(box: cluster.Sandbox, indexes: range, before_each: Any,
             ready: Any = None) -> dict[str, Any]:
    """`node_failure` of each job of INDEXES in turn (BEFORE_EACH first): each trial's
    figures, and the median and worst of the detection and of the whole. READY, if given,
    counts the endpoints ready at each trial (the rollout still under way)."""
    trials = []
    for index in indexes:
        before_each()
        trial: dict[str, Any] = node_failure(box, training_job(index)["metadata"]["name"])
        if ready is not None:
            trial["endpoints_ready"] = ready()
        trials.append(trial)
    return {"trials": trials, **{
        f"{key}_{name}": round(pick([t[key] for t in trials]), 2)
        for key in ("detection_s", "placement_s", "total_s", "recorded_s", "kubectl_s")
        for name, pick in (("median", statistics.median), ("max", max))}}


def component_rss(box: cluster.Sandbox, component: str) -> float:
    found = subprocess.run(["pgrep", "-f", f"clusters/{box.name}/bin/{component}"],
                           capture_output=True, text=True).stdout.split()
    return rss_mb(int(found[0]))[0] if found else float("nan")


def measure(domains: int, jobs: int, endpoints: int, replicas: int, window: float,
            progress: bool = True, namespaces: int = 1) -> dict[str, Any]:
    result: dict[str, Any] = {"nodes": domains * 4, "trainingjobs": jobs,
                              "inferenceendpoints": endpoints, "namespaces": namespaces,
                              "pods": jobs * 4 + endpoints * replicas}
    pods = result["pods"]
    spaces = sorted({NAMESPACE, *(endpoint_namespace(i, namespaces)
                                  for i in range(min(endpoints, namespaces)))})
    with sandbox(NAME, f"synthetic:trn2:{domains}", GROUP, spaces,
                 wait_seconds=max(1200.0, domains * 0.6)) as box:
        operator = OperatorProcess(box, Path(box.home) / "operator.log")
        try:
            operator.start()
            wait_until(operator.ready, 300, "operator ready on the idle fleet")
            time.sleep(window / 2)  # a few idle passes
            idle = operator.metrics()
            result["idle_rss_mb"] = round(rss_mb(operator.pid)[0], 1)
            result["idle_pass_p99_s"] = round(quantile(pass_buckets(idle), 0.99), 3)

            started = time.monotonic()
            apply_all(box, [training_job(i) for i in range(jobs)])
            wait_until(lambda: all_running(box, jobs, 0, replicas)[0] == jobs,
                       max(1800.0, jobs * 4 / 2), "every job running", 2.0)
            result["jobs_running_s"] = round(time.monotonic() - started, 1)
            result["failure_idle"] = failures(box, range(TRIALS), lambda: None)

            started = time.monotonic()
            apply_all(box, [endpoint(i, replicas, namespaces) for i in range(endpoints)])
            result["apply_s"] = round(time.monotonic() - started, 1)
            spacing = random.Random(7)  # trials land at different points of a pass

            def between() -> None:
                time.sleep(spacing.uniform(window / 20, window / 6))

            result["failure_rollout"] = failures(box, range(TRIALS, 2 * TRIALS), between,
                                                 lambda: all_running(box, jobs, endpoints,
                                                                     replicas)[1])
            last = 0.0

            def done() -> bool:
                nonlocal last
                running, full = all_running(box, jobs, endpoints, replicas)
                if progress and time.monotonic() - last > 15:
                    last = time.monotonic()
                    print(f"# {time.monotonic() - started:.0f}s: {running}/{jobs} jobs "
                          f"running, {full}/{endpoints} endpoints ready, operator RSS "
                          f"{rss_mb(operator.pid)[0]:.0f} MiB", file=sys.stderr, flush=True)
                return running == jobs and full == endpoints

            # a pod a second at worst: the bulk writes' pace is the API server's
            wait_until(done, max(3600.0, float(pods)), "everything running", 5.0)
            result["all_running_s"] = round(time.monotonic() - started, 1)
            before, t0 = operator.metrics(), time.monotonic()
            time.sleep(window)
            after, elapsed = operator.metrics(), time.monotonic() - t0
            busy = minus(pass_buckets(after), pass_buckets(idle))
            result["passes"] = int(busy[float("inf")])
            result["pass_p50_s"] = round(quantile(busy, 0.5), 3)
            result["pass_p99_s"] = round(quantile(busy, 0.99), 3)
            objects = minus(pass_buckets(after, OBJECT), pass_buckets(idle, OBJECT))
            result["reconciles"] = int(objects.get(float("inf"), 0))
            result["reconcile_p50_s"] = round(quantile(objects, 0.5), 3)
            result["reconcile_p99_s"] = round(quantile(objects, 0.99), 3)
            steady = minus(pass_buckets(after), pass_buckets(before))
            result["steady_pass_p99_s"] = round(quantile(steady, 0.99), 3)
            result["api_rps_steady"] = round((api_requests(after) - api_requests(before))
                                             / elapsed, 2)
            result["api_rps_rollout"] = round((api_requests(before) - api_requests(idle))
                                              / (result["all_running_s"]
                                                 + result["jobs_running_s"]), 1)
            result["api_requests_total"] = int(api_requests(after))
            result["api_calls_rollout"] = api_calls(before, idle)
            result["api_calls_steady"] = api_calls(after, before)
            result["rss_mb"], result["peak_rss_mb"] = (round(v, 1)
                                                       for v in rss_mb(operator.pid))
            result["kcm_rss_mb"] = round(component_rss(box, "kube-controller-manager"), 1)
            result["scheduler_rss_mb"] = round(component_rss(box, "kube-scheduler"), 1)

            restarts = sum(int((j.get("status") or {}).get("restarts", 0))
                           for j in listed(box, "trainingjobs"))
            print(f"# before the restart: {json.dumps(result)}", file=sys.stderr, flush=True)
            result["stop_s"] = round(operator.stop(), 1)
            operator.start()
            result["restart_ready_s"] = round(wait_until(operator.ready, 600, "ready again"), 1)
            result["restart_first_pass_s"] = round(wait_until(
                lambda: operator.metrics().get(f"{PASS}_count", 0) >= 1, 600, "first pass")
                + result["restart_ready_s"], 1)
            time.sleep(window / 2)
            running, full = all_running(box, jobs, endpoints, replicas)
            result["after_restart_running"] = f"{running}/{jobs} jobs, {full}/{endpoints} endpoints"
            result["jobs_restarted_by_operator_restart"] = sum(
                int((j.get("status") or {}).get("restarts", 0))
                for j in listed(box, "trainingjobs")) - restarts
            time.sleep(max(0.0, 75 - result["restart_first_pass_s"] - window / 2))
            now_mb, peak_mb = rss_mb(operator.pid)  # after the first memory trim (60 s in)
            result["restart_rss_mb"], result["restart_peak_rss_mb"] = (round(now_mb, 1),
                                                                       round(peak_mb, 1))
        finally:
            operator.stop()
    return result


def versus(rollout: dict[str, Any], idle: dict[str, Any], key: str, target: str
           ) -> tuple[str, str, str, str]:
    """A failure figure's table cells: the rollout's median / worst, the target, the
    jobs-only fleet's, and their ratios (none without a target)."""
    def pair(figures: dict[str, Any]) -> str:
        return f"{figures[f'{key}_median']} / {figures[f'{key}_max']}"

    ratios = " / ".join(f"{rollout[f'{key}_{end}'] / max(idle[f'{key}_{end}'], 0.01):.1f}x"
                        for end in ("median", "max"))
    return pair(rollout), target, f"jobs only {pair(idle)}", ratios if target else ""


def table(r: dict[str, Any]) -> str:
    idle, rollout = r["failure_idle"], r["failure_rollout"]
    rows = [
        ("operator RSS (steady / peak), MiB", f"{r['rss_mb']} / {r['peak_rss_mb']}", "<= 400",
         f"kube-controller-manager {r['kcm_rss_mb']}",
         f"{r['peak_rss_mb'] / r['kcm_rss_mb']:.2f}x"),
        ("", "", "", f"kube-scheduler {r['scheduler_rss_mb']}",
         f"{r['peak_rss_mb'] / r['scheduler_rss_mb']:.2f}x"),
        ("one object's reconcile p50 / p99, s",
         f"{r['reconcile_p50_s']} / {r['reconcile_p99_s']}", "p99 <= 2", "", ""),
        ("reconcile pass p50 / p99 under load, s", f"{r['pass_p50_s']} / {r['pass_p99_s']}",
         "", f"idle fleet p99 {r['idle_pass_p99_s']}",
         f"{r['pass_p99_s'] / max(r['idle_pass_p99_s'], 0.001):.1f}x"),
        ("reconcile pass p99 steady, s", r["steady_pass_p99_s"], "p99 <= 2", "", ""),
        ("API requests/s, rollout / steady", f"{r['api_rps_rollout']} / {r['api_rps_steady']}",
         "", "", ""),
        ("apply -> jobs running / endpoints' apply -> all running, s",
         f"{r['jobs_running_s']} / {r['all_running_s']}", "", "", ""),
        (f"a node failure -> new placement, median / worst of {TRIALS}, s, during the "
         "rollout", *versus(rollout, idle, "total_s", "<= 2x idle")),
        ("the same as the job's incident record says, median / worst, s",
         *versus(rollout, idle, "recorded_s", "<= 2x idle")),
        ("of which detection (quarantined), median / worst, s",
         *versus(rollout, idle, "detection_s", "")),
        ("of which detection -> new placement, median / worst, s",
         *versus(rollout, idle, "placement_s", "<= 2x idle")),
        ("one kubectl call just before, median / worst, s (not in the figures above)",
         *versus(rollout, idle, "kubectl_s", "")),
        ("operator RSS after a restart (a minute in / peak), MiB",
         f"{r['restart_rss_mb']} / {r['restart_peak_rss_mb']}", "", "", ""),
        ("SIGTERM -> the operator exited, s", r["stop_s"], "< 60 (else killed)", "", ""),
        ("restart -> ready / first full pass, s",
         f"{r['restart_ready_s']} / {r['restart_first_pass_s']}", "", "", ""),
        ("jobs restarted by the operator restart", r["jobs_restarted_by_operator_restart"],
         "0", "", ""),
    ]
    lines = [f"{r['nodes']} nodes, {r['trainingjobs']} TrainingJobs, "
             f"{r['inferenceendpoints']} InferenceEndpoints, {r['pods']} pods; "
             f"{r['passes']} passes and {r['reconciles']} object reconciles measured",
             "| metric | ours | target | baseline (same run) | ratio |", "|---|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in rows]
    for stage in ("rollout", "steady"):
        lines.append(f"API calls, {stage} (the API server's seconds, count x mean): " + ", ".join(
            f"{call} {c['seconds']} s ({c['count']} x {c['mean_ms']} ms)"
            for call, c in r[f"api_calls_{stage}"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="200 nodes, 20 jobs, 50 endpoints x 8 replicas (~500 pods)")
    parser.add_argument("--domains", type=int, help="UltraServers (4 nodes each)")
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--endpoints", type=int)
    parser.add_argument("--replicas", type=int, help="replicas per endpoint")
    parser.add_argument("--namespaces", type=int, default=1,
                        help="spread the endpoints over this many namespaces (the jobs "
                             "stay in one): kube-controller-manager's Service endpoints "
                             "controllers scan a namespace's pods for each Service sync")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    sizes = (50, 20, 50, 8, 20.0) if args.quick else (500, 200, 500, 18, 60.0)
    domains, jobs, endpoints, replicas = (
        given if given is not None else default for given, default in zip(
            (args.domains, args.jobs, args.endpoints, args.replicas), sizes[:4], strict=True))
    if jobs > domains or jobs * 4 * 16 + endpoints * replicas * 2 > domains * 4 * 16:
        parser.error("that many jobs and replicas do not fit the fleet")
    if jobs < 2 * TRIALS:
        parser.error(f"at least {2 * TRIALS} jobs: each node failure trial fails another")
    result = measure(domains, jobs, endpoints, replicas, sizes[4],
                     namespaces=args.namespaces)
    print(table(result))
    if args.json:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
