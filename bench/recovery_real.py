"""Recovery on real nodes: a real node fails mid-training -> every worker training again.

The example PyTorch trainer (examples/trn2/trainingjob-trainer.yaml: 4 workers of one
UltraServer, a checkpoint every 10 steps, steps paced to 0.5 s) runs on a trn2 sandbox
whose first 5 nodes are real. Each trial stops the kubelet of rank 1's node (a partition:
its container keeps running) and watches from outside, polling the API server every 50 ms:
- detection: until the node is quarantined (the controller-manager's 50 s grace period for
  a silent node, then the group's 5 s notReadyGraceSeconds);
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
        while "training" not in marks:
            now = time.monotonic()
            if now - t0 > 300:
                raise RuntimeError(f"trial {restart}: no recovery in 300 s ({marks})")
            status = self.observe(victim, restart, marks, now)
            progress = status.get("progress") or {}
            reported = parse_time(progress.get("time")) or 0.0
            if "running" in marks and status.get("restarts") == restart and \
                    reported > wall0 + (marks["replaced"] - t0):
                marks["training"] = now
            time.sleep(POLL)
        self.restore(victim)
        return {**phases(marks, t0),
                "checkpoint_load": marks["training"] - marks["running"],
                "total": marks["training"] - t0,
                "k8s_taint": marks.get("k8s_noexecute", math.nan) - t0}


def run(trials: int, log: Any) -> list[dict[str, float]]:
    """TRIALS real-node failures; one row per trial (seconds per phase)."""
    results: list[dict[str, float]] = []
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
    return results
