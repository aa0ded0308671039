"""Recovery on real nodes: a real node fails mid-training -> every worker training again.

The example PyTorch trainer (examples/trn2/trainingjob-trainer.yaml: 4 workers of one
UltraServer, a checkpoint every 10 steps, steps paced to 0.5 s) runs on a trn2 sandbox
whose first 5 nodes are real. Each trial stops the kubelet of rank 1's node (a partition:
its container keeps running) and watches from outside, polling the API server every 50 ms:
- detection: until the node is quarantined (its kubelet's Lease silent for the group's
  leaseSilenceSeconds, 20 s; before that, the controller-manager's 50 s grace for a silent
  node);
- replacement: until the job's status holds the next restart's placement;
- restart: until every worker of that restart is Running;
- checkpoint load: until the new attempt's first step report (python and torch start,
  rank 0's name resolves, rendezvous, the checkpoint is read and its digest verified, one
  step trained).
Then the kubelet comes back, the node's quarantine is lifted, and the next trial fails rank
1's node again (the rank moved: it alternates between two nodes).

Baseline, same trials: Kubernetes alone evicts pods from a NotReady node when its
not-ready/unreachable NoExecute taint has been there for the default 300 s toleration (the
taint's arrival is observed in each trial), then reschedules; we count our own restart and
checkpoint load after that (generous: nothing would restore the gang or its ranks).
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path
from typing import Any

import yaml

from bench.harness import operator_sandbox
from bench.recovery import POLL, Bench, phases
from goodput_operator.health.quarantine import parse_time
from goodput_operator.sandbox import faults
from goodput_operator.topology.record import ranks_of

ROOT = Path(__file__).resolve().parents[1]
NAME = "bench-recovery-real"
NAMESPACE = "bench"
REAL_NODES = 5
BASELINE_WAIT = 120  # seconds a trial watches for the lifecycle controller's taint


def group() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(
        (ROOT / "examples" / "trn2" / "ultraservergroup-real.yaml").read_text())
    return doc


def trainer_job() -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load(
        (ROOT / "examples" / "trn2" / "trainingjob-trainer.yaml").read_text())
    job = copy.deepcopy(job)
    job["metadata"]["namespace"] = NAMESPACE
    job["spec"]["failurePolicy"]["maxRestarts"] = 1000
    job["spec"]["checkpoint"]["dir"] = "/shared/checkpoints/bench-recovery"
    job["spec"]["template"]["spec"]["containers"][0]["args"] = [
        "--steps", "1000000", "--checkpoint-every", "10", "--step-seconds", "0.5"]
    return job


class RealBench(Bench):
    """The example trainer's job: 4 workers on real nodes."""

    def __init__(self, box: Any) -> None:
        super().__init__(box, trainer_job()["metadata"]["name"], workers=4)

    def trial(self, restart: int) -> dict[str, float]:
        status = self.job()["status"]
        victim = {r["rank"]: r["node"] for r in ranks_of(status["placement"])}[1]
        t0, wall0 = time.monotonic(), time.time()
        faults.fail_node(self.box, victim)
        marks: dict[str, float] = {}
        # until training again, and the lifecycle controller's taint (the baseline) seen:
        # recovery now comes before it, so the trial watches on for it
        while "training" not in marks or ("k8s_noexecute" not in marks and
                                          time.monotonic() - t0 < BASELINE_WAIT):
            now = time.monotonic()
            if now - t0 > 300 and "training" not in marks:
                raise RuntimeError(f"trial {restart}: no recovery in 300 s ({marks})")
            status = self.observe(victim, restart, marks, now)
            progress = status.get("progress") or {}
            reported = parse_time(progress.get("time")) or 0.0
            if "training" not in marks and "running" in marks and \
                    status.get("restarts") == restart and \
                    reported > wall0 + (marks["replaced"] - t0):
                marks["training"] = now
            time.sleep(POLL)
        self.restore(victim)
        return {**phases(marks, t0),
                "checkpoint_load": marks["training"] - marks["running"],
                "total": marks["training"] - t0,
                "k8s_taint": marks.get("k8s_noexecute", math.nan) - t0}


HANG_WINDOW = 20  # failurePolicy.hang.minSeconds of the hang trials (steps are 0.5 s)


def hang_job(trial: int) -> dict[str, Any]:
    """The trainer, rank 1 stopping before step 25's collective in the first attempt."""
    job = trainer_job()
    job["metadata"]["name"] = f"bench-hang-{trial}"
    job["spec"]["checkpoint"]["dir"] = f"/shared/checkpoints/bench-hang-{trial}"
    job["spec"]["failurePolicy"]["hang"] = {"stepTimeMultiple": 10, "minSeconds": HANG_WINDOW}
    job["spec"]["template"]["spec"]["containers"][0]["args"] = [
        "--steps", "1000000", "--checkpoint-every", "10", "--step-seconds", "0.5",
        "--hang-at-step", "25"]
    return job


def hang_trial(bench: Bench, trial: int) -> dict[str, float]:
    """One hang, from the incident's own times: detection (the last step -> the verdict,
    the window included), restart (-> every worker running again), checkpoint load (-> the
    new attempt's first step) and in all (the last step -> training again)."""
    job = hang_job(trial)
    watched = Bench(bench.box, job["metadata"]["name"], workers=4)
    bench.box.kubectl("apply", "--server-side", "-f", "-", input_text=yaml.safe_dump(job))

    def trained_again() -> dict[str, Any] | None:
        status = watched.job().get("status") or {}
        incident = (status.get("incidents") or [{}])[-1]
        running = parse_time(incident.get("runningAt"))
        stepped = parse_time((status.get("progress") or {}).get("time"))
        return status if incident.get("cause") == "Hang" and running is not None and \
            stepped is not None and stepped > running else None

    deadline = time.monotonic() + 300
    while (status := trained_again()) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"hang trial {trial}: no restart and training in 300 s")
        time.sleep(POLL)
    incident = status["incidents"][-1]
    failed_at, detected_at, running_at = (parse_time(incident[k]) or 0.0 for k in (
        "failedAt", "detectedAt", "runningAt"))
    stepped_at = parse_time(status["progress"]["time"]) or 0.0
    bench.box.kubectl("delete", "tj", watched.name, "-n", NAMESPACE, "--wait=true")
    return {"detection": detected_at - failed_at, "restart": running_at - detected_at,
            "checkpoint_load": stepped_at - running_at, "total": stepped_at - failed_at}


def run(trials: int, log: Any, hang_trials: int = 0
        ) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """TRIALS real-node failures and HANG_TRIALS hangs; one row per trial (seconds per
    phase) for each."""
    results: list[dict[str, float]] = []
    hangs: list[dict[str, float]] = []
    with operator_sandbox(NAME, "trn2", group(), namespaces=[NAMESPACE],
                          wait_seconds=300, real_nodes=REAL_NODES) as box:
        bench = RealBench(box)
        box.kubectl("apply", "--server-side", "-f", "-", input_text=yaml.safe_dump(
            trainer_job()))
        bench.wait("the trainer running and checkpointing", lambda: bench.running(0) and (
            (bench.job().get("status") or {}).get("checkpoint") or {}).get("latest"), 300)
        for trial in range(1, trials + 1):
            row = bench.trial(trial)
            results.append(row)
            log(f"# real trial {trial}: " + ", ".join(f"{k} {v:.2f}s" for k, v in row.items()))
        box.kubectl("delete", "tj", "--all", "-n", NAMESPACE, "--wait=true")
        for trial in range(1, hang_trials + 1):
            row = hang_trial(bench, trial)
            hangs.append(row)
            log(f"# hang trial {trial}: " + ", ".join(f"{k} {v:.2f}s" for k, v in row.items()))
    return results, hangs
