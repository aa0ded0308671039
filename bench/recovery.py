"""Recovery benchmark: `fail-node` -> every worker running again, and what Kubernetes alone
would take for the same failure.

    python -m bench.recovery [--quick] [--json] [--trials N] [--real-nodes]

On a sandbox with the built-in trn2 fleet (4 UltraServers x 4 nodes), an UltraServerGroup
with one spare per UltraServer and default quarantine settings, and a running 3-worker x
16-chip TrainingJob. Each trial fails the node of rank 1 and watches, from outside, by
polling the API server every 50 ms:
- detection: until the node carries the goodput.dev/quarantine taint;
- replacement: until the job's status holds the new placement for the next restart;
- restart: until every worker of that restart is Running.
Then it heals the node, lifts its quarantine (it becomes the UltraServer's spare again)
and runs the next trial on the same job.

Baseline, computed in the same run: with Kubernetes defaults the pods on a NotReady node
are evicted only when the node.kubernetes.io/not-ready:NoExecute taint has been there for
the default 300 s toleration; the node lifecycle controller's time to add that taint is
observed in each trial (kwokctl runs the controller-manager of a sandbox without real nodes
with --node-monitor-period=25s, so expect about 25 s there), and the
rescheduling after eviction is counted as our observed restart phase (generous to the
baseline: nothing would restore the gang or its rank order). Target: median <= 15 s end to
end.

`--real-nodes` adds the same measurement on real nodes under a real PyTorch job, with a
checkpoint-load phase (bench/recovery_real.py), in the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from typing import Any, cast

from kubernetes import client, config

from bench.harness import operator_sandbox
from goodput_operator import names
from goodput_operator.health import quarantine as q
from goodput_operator.sandbox import cluster, faults
from goodput_operator.topology.record import ranks_of

NAME = "bench-recovery"
FLEET = "trn2"
NAMESPACE = "bench"
JOB = "llama"
TOLERATION_SECONDS = 300  # DefaultTolerationSeconds for not-ready:NoExecute
POLL = 0.05


def group() -> dict[str, Any]:
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
            "metadata": {"name": "bench-trn2"},
            "spec": {"nodeSelector": {"node.kubernetes.io/instance-type": "trn2u.48xlarge"},
                     "networkLevels": ["topology.k8s.aws/network-node-layer-1",
                                       "topology.k8s.aws/network-node-layer-2"],
                     "accelerator": {"perNode": 16}, "nodesPerDomain": 4,
                     "spares": {"perDomain": 1}, "probes": {"schedule": ""}}}


def training_job() -> dict[str, Any]:
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": JOB, "namespace": NAMESPACE},
            "spec": {"ultraServerGroup": "bench-trn2", "workers": 3, "acceleratorsPerWorker": 16,
                     "failurePolicy": {"maxRestarts": 1000},
                     "template": {"spec": {"containers": [
                         {"name": "worker", "image": "example.com/train:1"}]}}}}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)]


def quarantined(node: dict[str, Any]) -> bool:
    """The operator has quarantined NODE (its label)."""
    return names.QUARANTINE_LABEL in (node["metadata"].get("labels") or {})


def replaced(job: dict[str, Any], restart: int) -> bool:
    """JOB has a placement for attempt RESTART."""
    status = job.get("status") or {}
    return status.get("restarts") == restart and bool(status.get("placement"))


class Bench:
    """One TrainingJob (NAME, WORKERS workers) in NAMESPACE, watched through the API."""

    def __init__(self, box: cluster.Sandbox, name: str = JOB, workers: int = 3,
                 namespace: str = NAMESPACE) -> None:
        self.box, self.name, self.workers, self.namespace = box, name, workers, namespace
        api = config.new_client_from_config(config_file=str(box.kubeconfig))  # type: ignore[no-untyped-call]
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def job(self) -> dict[str, Any]:
        return cast(dict[str, Any], self.custom.get_namespaced_custom_object(
            "goodput.dev", "v1alpha1", self.namespace, "trainingjobs", self.name))

    def node(self, name: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.api.sanitize_for_serialization(
            self.core.read_node(name)))

    def running(self, restart: int) -> bool:
        listed = self.api.sanitize_for_serialization(
            self.core.list_namespaced_pod(self.namespace,
                                          label_selector=f"{names.JOB_LABEL}={self.name}"))
        pods = cast(list[dict[str, Any]], listed["items"])
        return len(pods) == self.workers and all(
            p["metadata"]["labels"].get(names.RESTART_LABEL) == str(restart)
            and p.get("status", {}).get("phase") == "Running" for p in pods)

    def wait(self, what: str, check: Any, timeout: float = 120) -> float:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(POLL)
        return time.monotonic()

    def observe(self, victim: str, restart: int, marks: dict[str, float], now: float
                ) -> dict[str, Any]:
        """One poll of a trial: mark NOW for each phase first reached (the lifecycle
        controller's NoExecute taint, the quarantine, the restart's placement, all workers
        of the restart Running). Returns the job's status as read."""
        body = self.node(victim)
        if "k8s_noexecute" not in marks and any(
                t.get("key") in faults.LIFECYCLE_TAINTS and t.get("effect") == "NoExecute"
                for t in body["spec"].get("taints") or []):
            marks["k8s_noexecute"] = now
        if "detected" not in marks and quarantined(body):
            marks["detected"] = now
        job = self.job()
        status: dict[str, Any] = job.get("status") or {}
        if "replaced" not in marks and replaced(job, restart):
            marks["replaced"] = now
        if "replaced" in marks and "running" not in marks and self.running(restart):
            marks["running"] = now
        return status

    def trial(self, restart: int) -> dict[str, float]:
        ranks = {r["rank"]: r["node"] for r in ranks_of(self.job()["status"]["placement"])}
        victim = ranks[1]
        t0 = time.monotonic()
        faults.fail_node(self.box, victim)
        marks: dict[str, float] = {}
        while len(marks) < 4:
            now = time.monotonic()
            if now - t0 > 120:
                raise RuntimeError(f"trial {restart}: no recovery in 120 s ({marks})")
            self.observe(victim, restart, marks, now)
            if "running" in marks and "k8s_noexecute" not in marks and now - t0 > 90:
                marks["k8s_noexecute"] = math.nan  # not tainted NoExecute within 90 s
            time.sleep(POLL)
        self.restore(victim)
        incident = (self.job()["status"].get("incidents") or [{}])[-1]
        return {**phases(marks, t0), "total": marks["running"] - t0,
                "k8s_taint": marks["k8s_noexecute"] - t0,
                "status_detection": float(incident.get("detectionSeconds") or math.nan)}

    def restore(self, victim: str) -> None:
        """Heal the node and lift its quarantine: it becomes its UltraServer's spare again."""
        faults.heal_node(self.box, victim)
        self.wait("node recovered", lambda: faults.recovered(self.node(victim)))
        self.core.patch_node(victim, q.release_patch(self.node(victim)),
                             _content_type="application/merge-patch+json")
        time.sleep(1)  # the operator sees the release before the next failure


def phases(marks: dict[str, float], t0: float) -> dict[str, float]:
    """Detection, replacement and restart seconds from a trial's marks (failure at T0)."""
    return {"detection": marks["detected"] - t0,
            "replacement": max(0.0, marks["replaced"] - marks["detected"]),
            "restart": marks["running"] - max(marks["replaced"], marks["detected"])}


def summarize(results: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Median and p90 of each phase, and the Kubernetes-defaults baseline of the same trials:
    the NoExecute taint's arrival + the 300 s toleration + our own restart phases after it."""
    summary: dict[str, dict[str, float]] = {}
    for key in ("detection", "replacement", "restart", "checkpoint_load", "total", "k8s_taint"):
        values = [r[key] for r in results if key in r and not math.isnan(r[key])]
        summary[key] = {"median": round(statistics.median(values), 2),
                        "p90": round(percentile(values, 0.9), 2)} if values else {}
    baseline = [r["k8s_taint"] + TOLERATION_SECONDS + r["restart"] + r.get("checkpoint_load", 0)
                for r in results if not math.isnan(r["k8s_taint"])]
    summary["baseline_k8s_defaults"] = {
        "median": round(statistics.median(baseline), 2),
        "p90": round(percentile(baseline, 0.9), 2)} if baseline else {}
    return summary


def print_table(title: str, summary: dict[str, dict[str, float]]) -> float:
    """The phases as a Markdown table; returns the baseline / ours ratio of the medians."""
    print(f"| phase | median s | p90 s |  ({title})")
    print("|---|---|---|")
    for key, label in (("detection", "detection (fail-node -> quarantined)"),
                       ("replacement", "replacement (-> new placement)"),
                       ("restart", "restart (-> all workers Running)"),
                       ("checkpoint_load", "checkpoint load (-> first step of the new "
                                           "attempt reported)"),
                       ("total", "**end to end**"),
                       ("baseline_k8s_defaults", "Kubernetes defaults (NoExecute taint + "
                                                 "300 s + restart)")):
        row = summary[key]
        if row or key != "checkpoint_load":
            print(f"| {label} | {row.get('median', 'n/a')} | {row.get('p90', 'n/a')} |")
    base, ours = summary["baseline_k8s_defaults"], summary["total"]
    ratio = base["median"] / ours["median"] if base and ours else math.nan
    print(f"\nKubernetes defaults / ours (medians): {ratio:.1f}x\n")
    return ratio


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 trials")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--real-nodes", action="store_true",
                        help="also fail real nodes under the example PyTorch trainer "
                             "(bench/recovery_real.py; needs root), beside the KWOK figure")
    parser.add_argument("--hang", type=int, default=0, metavar="N",
                        help="with --real-nodes: also N hang trials (rank 1 of the trainer "
                             "stops before a collective; failurePolicy.hang.minSeconds 20); "
                             "the baseline, the operator before hang detection: never")
    parser.add_argument("--jobset", type=int, default=0, metavar="N",
                        help="with --real-nodes: also N trials of the same trainer as a "
                             "tuned JobSet (examples/peers/jobset-trainer.yaml), the operator "
                             "stopped")
    parser.add_argument("--kueue", type=int, default=0, metavar="N",
                        help="with --real-nodes: also N trials of the same trainer as an "
                             "Indexed Job under Kueue TAS hot swap "
                             "(examples/peers/kueue-tas-trainer.yaml), the operator stopped")
    parser.add_argument("--object-store", type=int, default=0, metavar="N",
                        help="with --real-nodes: also N trials of the trainer checkpointing "
                             "to the sandbox's S3-compatible server instead of the shared "
                             "folder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    trials = 3 if args.quick else args.trials
    results: list[dict[str, float]] = []
    with operator_sandbox(NAME, FLEET, group(), namespaces=[NAMESPACE]) as box:
        bench = Bench(box)
        box.kubectl("apply", "--server-side", "-f", "-", input_text=json.dumps(training_job()))
        bench.wait("job running", lambda: bench.running(0))
        for trial in range(1, trials + 1):
            row = bench.trial(trial)
            results.append(row)
            log(f"# trial {trial}: " + ", ".join(f"{k} {v:.2f}s" for k, v in row.items()))
    summary = summarize(results)
    ratio = print_table(f"{len(results)} trials, KWOK nodes of fleet {FLEET}, 1 spare per "
                        "UltraServer, default quarantine settings", summary)
    print(f"Target median <= 15 s end to end (KWOK): "
          f"{'met' if summary['total']['median'] <= 15 else 'NOT met'}\n")
    output: dict[str, Any] = {"fleet": FLEET, "trials": results, "summary": summary,
                              "ratio_baseline_over_ours": round(ratio, 1)}
    if args.real_nodes:
        from bench import recovery_peers, recovery_real

        real, hangs, peer_rows = recovery_real.run(trials, log, args.hang, args.jobset,
                                                   args.kueue, args.object_store)
        stored = peer_rows.pop(recovery_real.STORE, [])
        real_summary = summarize(real)
        real_ratio = print_table(f"{len(real)} trials, real nodes: the example PyTorch "
                                 "trainer, 4 workers; a kubelet stopped", real_summary)
        output["real_nodes"] = {"trials": real, "summary": real_summary,
                                "ratio_baseline_over_ours": round(real_ratio, 1)}
        if hangs:
            hang_summary = {phase: {"median": round(statistics.median(r[phase] for r in hangs),
                                                    2),
                                    "p90": round(percentile([r[phase] for r in hangs], 0.9), 2)}
                            for phase in hangs[0]}
            print(f"{len(hangs)} hang trials, real nodes (window {recovery_real.HANG_WINDOW} s):"
                  " median (p90) s; without hang detection the job never recovers")
            for phase, values in hang_summary.items():
                print(f"  {phase:<16} {values['median']:>8.2f} ({values['p90']:.2f})")
            output["real_nodes"]["hangs"] = {"trials": hangs, "summary": hang_summary,
                                             "baseline": "never (the job stays Running, hung)"}
        if stored:
            stored_summary = summarize(stored)
            print_table(f"{len(stored)} trials, real nodes, checkpoints on the S3-compatible "
                        "server (versitygw): the same failure", stored_summary)
            output["real_nodes"]["object_store"] = {"trials": stored,
                                                    "summary": stored_summary}
        from goodput_operator.sandbox import versions

        named = {recovery_real.JOBSET: f"JobSet {versions.JOBSET} tuned",
                 recovery_peers.KUEUE: f"Kueue {versions.KUEUE} TAS hot swap"}
        for system, rows in peer_rows.items():
            output["real_nodes"][system] = recovery_real.against_peer(
                real, rows, named[system])
    if args.json:
        print(json.dumps(output, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
