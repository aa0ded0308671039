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

With `bench.recovery --real-nodes --jobset N`: the same trainer as a JobSet v0.11.1
(examples/peers/jobset-trainer.yaml), tuned (NoExecute tolerations of 0 s, backoffLimit 0:
the whole gang made again at the lifecycle controller's taint), the operator stopped, the
same kubelet stopped under rank 1. Per trial: the taint, all ranks running again off that
node, and training again (rank 0's first step of the new attempt, read from its log's
runtime timestamps; the attempt starts at step 0, as nothing tells it where to resume:
no checkpoint load, generous to JobSet).

With `--kueue N`: the same trainer as an Indexed Job under Kueue v0.17.0's Topology Aware
Scheduling (examples/peers/kueue-tas-trainer.yaml: required inside the network block the
group keeps a moved rank in, tolerations of 0 s), Kueue at its defaults (hot swap on), the
operator stopped. Kueue swaps the failed node for the block's free one and the Job makes
the lost index again there; nothing restarts the other ranks, so "training again" is the
new rank 1's first step: whether it rejoins a collective the old ranks are still in is up
to the trainer (the example trainer does not: a fixed-world `init_process_group`).
"""

from __future__ import annotations

import copy
import datetime
import json
import math
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from bench.harness import OperatorProcess, sandbox, wait_until
from bench.recovery import POLL, Bench, phases
from bench.recovery_peers import KUEUE, TIMEOUT, Peer, evicted_at_the_taint, gang_state
from goodput_operator.api.ultraservergroup import UltraServerGroupSpec
from goodput_operator.sandbox import faults, jobset, kueue, peers
from goodput_operator.times import parse
from goodput_operator.topology.record import ranks_of

ROOT = Path(__file__).resolve().parents[1]
NAME = "bench-recovery-real"
NAMESPACE = "bench"
REAL_NODES = 5
WORKERS = 4  # the example trainer's
BASELINE_WAIT = 120  # seconds a trial watches for the lifecycle controller's taint
STEP_SECONDS = 0.5  # the trials' trainer paces its steps to this
MAX_RESTARTS = 10  # restarts a job may take: more than the trials of one run
JOBSET = "jobset-tuned"
KUEUE_QUEUE = "trn2-real"  # examples/peers/kueue-tas-trainer.yaml's
TRAINER_ARGS = ["--steps", "1000000", "--checkpoint-every", "10",
                "--step-seconds", str(STEP_SECONDS)]


def group() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(
        (ROOT / "examples" / "trn2" / "ultraservergroup-real.yaml").read_text())
    return doc


def trainer_job(store: bool = False) -> dict[str, Any]:
    """The example trainer's job, checkpointing to the shared folder, or with STORE to the
    sandbox's S3-compatible server (its Secret: STORE_SECRET)."""
    job: dict[str, Any] = yaml.safe_load(
        (ROOT / "examples" / "trn2" / "trainingjob-trainer.yaml").read_text())
    job = copy.deepcopy(job)
    job["metadata"]["namespace"] = NAMESPACE
    # a restart per trial, at once (the admission refuses a zero backoff above 10 restarts)
    job["spec"]["failurePolicy"]["maxRestarts"] = MAX_RESTARTS
    job["spec"]["checkpoint"]["dir"] = "/shared/checkpoints/bench-recovery"
    if store:
        job["metadata"]["name"] += "-s3"
        job["spec"]["checkpoint"] = {"dir": f"s3://{BUCKET}/bench-recovery",
                                     "credentialsSecret": STORE_SECRET}
    job["spec"]["template"]["spec"]["containers"][0]["args"] = list(TRAINER_ARGS)
    return job


BUCKET, STORE_SECRET = "checkpoints", "object-store"


def object_store(box: Any) -> None:
    """The sandbox's S3-compatible server (versitygw), its bucket, and the Secret the
    trainer's checkpoint.credentialsSecret names."""
    from goodput_operator.sandbox import objectstore
    from goodput_operator.sdk.objectstore import ObjectStore

    env = objectstore.start_for(box)
    ObjectStore.from_env(env).create_bucket(BUCKET)
    box.kubectl("create", "secret", "generic", STORE_SECRET, "-n", NAMESPACE,
                *(f"--from-literal={k}={v}" for k, v in env.items()))


class RealBench(Bench):
    """The example trainer's job: 4 workers on real nodes."""

    def __init__(self, box: Any, store: bool = False) -> None:
        super().__init__(box, trainer_job(store)["metadata"]["name"], workers=WORKERS)

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
            reported = parse(progress.get("time")) or 0.0
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
        running = parse(incident.get("runningAt"))
        stepped = parse((status.get("progress") or {}).get("time"))
        return status if incident.get("cause") == "Hang" and running is not None and \
            stepped is not None and stepped > running else None

    deadline = time.monotonic() + 300
    while (status := trained_again()) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"hang trial {trial}: no restart and training in 300 s")
        time.sleep(POLL)
    incident = status["incidents"][-1]
    failed_at, detected_at, running_at = (parse(incident[k]) or 0.0 for k in (
        "failedAt", "detectedAt", "runningAt"))
    stepped_at = parse(status["progress"]["time"]) or 0.0
    bench.box.kubectl("delete", "tj", watched.name, "-n", NAMESPACE, "--wait=true")
    return {"detection": detected_at - failed_at, "restart": running_at - detected_at,
            "checkpoint_load": stepped_at - running_at, "total": stepped_at - failed_at}


def jobset_trainer(name: str) -> dict[str, Any]:
    """examples/peers/jobset-trainer.yaml as the trials run it: NAME, the trials' trainer
    arguments, its own checkpoint folder, restarted up to MAX_RESTARTS times (as ours),
    and tuned as a user who read JobSet's docs would: NoExecute tolerations of 0 s
    and the Job's backoffLimit 0, so that the whole gang is made again as soon as the
    lifecycle controller taints a node (at its defaults nothing happens for 300 s more)."""
    doc: dict[str, Any] = yaml.safe_load(
        (ROOT / "examples" / "peers" / "jobset-trainer.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": NAMESPACE}
    doc["spec"]["failurePolicy"]["maxRestarts"] = MAX_RESTARTS
    job = doc["spec"]["replicatedJobs"][0]["template"]["spec"]
    job["backoffLimit"] = 0
    as_trialled(job["template"]["spec"], name, f"{name}-workers-0-0.{name}")
    return doc


def as_trialled(pod: dict[str, Any], name: str, rank0: str) -> None:
    """A peer's trainer POD as the trials run it: evicted at the lifecycle controller's
    taint, the trials' arguments, rank 0 at RANK0, its own checkpoint folder (NAME's)."""
    pod["tolerations"] = evicted_at_the_taint()
    [container] = pod["containers"]
    container["args"] = list(TRAINER_ARGS)
    env = {e["name"]: e for e in container["env"]}
    env["MASTER_ADDR"]["value"] = rank0
    env["GOODPUT_CHECKPOINT_DIR"]["value"] = f"/shared/checkpoints/{name}"


def kueue_trainer(name: str) -> list[dict[str, Any]]:
    """examples/peers/kueue-tas-trainer.yaml as the trials run it (its Service and Indexed
    Job): NAME, the trials' trainer arguments, its own checkpoint folder, and NoExecute
    tolerations of 0 s as the tuned JobSet's, so that the lost pod ends at the taint and the
    Job (its default backoffLimit) makes that index again where Kueue's hot swap puts it."""
    service, job = yaml.safe_load_all(
        (ROOT / "examples" / "peers" / "kueue-tas-trainer.yaml").read_text())
    for doc in (service, job):
        doc["metadata"] |= {"name": name, "namespace": NAMESPACE}
    service["spec"]["selector"] = {INDEX_JOB_NAME: name}
    pod = job["spec"]["template"]["spec"]
    pod["subdomain"] = name  # rank 0 is `<job>-0.<service>`
    as_trialled(pod, name, f"{name}-0.{name}")
    return [service, job]


INDEX_JOB_NAME = "batch.kubernetes.io/job-name"
STEP_LOG = re.compile(r"^(\S+) .* rank (\d+): step (\d+) loss ")


def first_step(log: str, step_seconds: float = STEP_SECONDS) -> float | None:
    """When a rank finished its attempt's first step (epoch seconds), from its log with
    the runtime's timestamps (`kubectl logs --timestamps`): it logs every 10th step, and
    paces steps to STEP_SECONDS, so step N's line came (N - 1) steps after the first.
    None before its first logged step. An attempt of a peer's gang starts at step 0:
    nothing tells it where to resume."""
    for line in log.splitlines():
        found = STEP_LOG.match(line)
        if found:
            stamp = datetime.datetime.fromisoformat(found[1].replace("Z", "+00:00"))
            return stamp.timestamp() - (int(found[3]) - 1) * step_seconds
    return None


def peer_trial(peer: Peer, system: str, name: str) -> dict[str, Any]:
    """The trainer as SYSTEM's gang (a tuned JobSet, or an Indexed Job under Kueue TAS);
    rank 1's kubelet stopped, as in ours' trials; to all ranks running again off that node
    and to training again: the first step of the lowest rank whose pod was made again
    (JobSet remakes the whole gang: rank 0; Kueue's Job remakes the lost index only)."""
    box = peer.box
    docs = [jobset_trainer(name)] if system == JOBSET else kueue_trainer(name)
    box.kubectl("apply", "--server-side", "-f", "-", input_text=yaml.safe_dump_all(docs))
    try:
        before = peer.running(system, name, WORKERS)
        wait_until(lambda: rank_stepped(box, peer.pods(system, name),
                                        before[0][1]) is not None, 300,
                   f"{system} {name} training")
    except RuntimeError:  # say what held it up
        for what in (("get", "pods", "-o", "wide"), ("get", "events")):
            print(box.kubectl(*what, "-n", NAMESPACE, check=False).stdout, file=sys.stderr)
        raise
    victim = before[1][0]
    t0, wall0 = time.monotonic(), time.time()
    faults.fail_node(box, victim)
    row: dict[str, Any] = {"system": system}
    while "training" not in row:
        now = time.monotonic() - t0
        if now > TIMEOUT or peer.failed(system, name):
            row["outcome"] = "timed out" if now > TIMEOUT else "failed"
            break
        if "k8s_taint" not in row and peer.tainted(victim):
            row["k8s_taint"] = round(now, 2)
        pods = peer.pods(system, name)
        after = gang_state(pods, frozenset({victim}), workers=WORKERS)
        remade = sorted(r for r in after or {} if after and after[r][1] != before[r][1])
        if after is not None and remade:
            row.setdefault("running", round(now, 2))
            stepped = rank_stepped(box, pods, after[remade[0]][1])
            if stepped is not None:
                row |= {"outcome": "recovered", "training": round(stepped - wall0, 2),
                        "recreated": len(remade),
                        "ranks_kept": all(after[r][0] == before[r][0] for r in (0, 2, 3))}
        time.sleep(POLL * 10)
    peer.delete(system, name)
    box.kubectl("delete", "service", "-n", NAMESPACE, name, "--ignore-not-found")
    faults.heal_node(box, victim)  # its kubelet ends the partitioned pod
    wait_until(lambda: not peer.pods(system, name), 180, f"{name}'s pods gone")
    wait_until(lambda: faults.recovered(peer.api.sanitize_for_serialization(
        peer.core.read_node(victim))), 120, f"{victim} recovered")
    return row


def rank_stepped(box: Any, pods: list[dict[str, Any]], uid: str) -> float | None:
    """When the pod of UID (one of PODS, as listed) finished its first step, once it has."""
    found = [p for p in pods if p["metadata"]["uid"] == uid]
    if not found:
        return None
    log = box.kubectl("logs", "-n", NAMESPACE, found[0]["metadata"]["name"], "--timestamps",
                      check=False)
    return first_step(log.stdout) if log.returncode == 0 else None


def against_peer(mine: list[dict[str, float]], theirs_rows: list[dict[str, Any]],
                 peer: str) -> dict[str, Any]:
    """Ours (MINE: the real-node trials) against a peer's trials (THEIRS_ROWS: PEER, as
    printed) on the same nodes: median seconds from the kubelet stopped to the taint, to
    all ranks running again and to training again, each over the trials that got there (a
    peer whose ranks ran again but never trained has a running figure and no training
    one), and ours / the peer's."""
    def median_of(key: str) -> float | None:
        found = [r[key] for r in theirs_rows if key in r]
        return round(statistics.median(found), 2) if found else None

    theirs = {key: median_of(key) for key in ("k8s_taint", "running", "training")}
    reached = {key: sum(1 for r in theirs_rows if key in r) for key in ("running", "training")}
    ours = {"running": round(statistics.median(r["total"] - r["checkpoint_load"]
                                               for r in mine), 2),
            "training": round(statistics.median(r["total"] for r in mine), 2)}
    ratios = {key: round(ours[key] / found, 3) if (found := theirs[key]) else None
              for key in ("running", "training")}
    count = len(theirs_rows)
    print(f"Real nodes, {peer}: taint {theirs['k8s_taint']} s; all ranks running again in "
          f"{reached['running']}/{count} trials, {theirs['running']} s (ours "
          f"{ours['running']} s: {ratios['running']}x); training again in "
          f"{reached['training']}/{count}, {theirs['training']} s (ours {ours['training']} s: "
          f"{ratios['training']}x)")
    return {"version": peer, "trials": theirs_rows, "median_s": theirs, "reached": reached,
            "ours_median_s": ours, "ours_over_peer": ratios}


def run(trials: int, log: Any, hang_trials: int = 0, jobset_trials: int = 0,
        kueue_trials: int = 0, store_trials: int = 0
        ) -> tuple[list[dict[str, float]], list[dict[str, float]],
                   dict[str, list[dict[str, Any]]]]:
    """TRIALS real-node failures and HANG_TRIALS hangs under ours; JOBSET_TRIALS under a
    tuned JobSet and KUEUE_TRIALS under Kueue TAS hot swap (the operator stopped); one row
    per trial (seconds per phase) for each, the peers' by system."""
    results: list[dict[str, float]] = []
    hangs: list[dict[str, float]] = []
    peers_rows: dict[str, list[dict[str, Any]]] = {}
    with sandbox(NAME, "trn2", group(), namespaces=[NAMESPACE], wait_seconds=300,
                 real_nodes=REAL_NODES) as box:
        operator = OperatorProcess(box, Path(box.home) / "operator.log", reports=True)
        operator.start()
        try:
            wait_until(operator.ready, 120, "operator ready")
            results, hangs = ours(box, trials, hang_trials, log)
            if store_trials:
                object_store(box)
                peers_rows[STORE] = ours_on_store(box, store_trials, log)
        finally:
            operator.stop()
        peer = Peer(box)
        if jobset_trials:
            jobset.start(box)
            peers_rows[JOBSET] = rows = []
            for trial in range(1, jobset_trials + 1):
                rows.append(peer_trial(peer, JOBSET, f"trainer-jobset-{trial}"))
                log(f"# JobSet trial {trial}: {rows[-1]}")
            jobset.stop(box)
        if kueue_trials:
            kueue.start(box)
            spec = UltraServerGroupSpec.model_validate(group()["spec"])
            for obj in peers.tas_objects(KUEUE_QUEUE, spec, REAL_NODES, NAMESPACE):
                box.kubectl("apply", "--server-side", "-f", "-", input_text=json.dumps(obj))
            peers_rows[KUEUE] = rows = []
            for trial in range(1, kueue_trials + 1):
                rows.append(peer_trial(peer, KUEUE, f"trainer-tas-{trial}"))
                log(f"# Kueue TAS trial {trial}: {rows[-1]}")
    return results, hangs, peers_rows


STORE = "object-store"  # the rows of the trials checkpointing to the S3-compatible server


def ours_on_store(box: Any, trials: int, log: Any) -> list[dict[str, Any]]:
    """TRIALS failures of the trainer checkpointing to the object store: the replacement
    fetches the step from it (sdk.tiers) where the others read the shared folder."""
    bench = RealBench(box, store=True)
    box.kubectl("apply", "--server-side", "-f", "-",
                input_text=yaml.safe_dump(trainer_job(store=True)))
    bench.wait("the trainer running and checkpointing to the object store",
               lambda: bench.running(0) and ((bench.job().get("status") or {}).get(
                   "checkpoint") or {}).get("latest"), 300)
    rows: list[dict[str, Any]] = []
    for trial in range(1, trials + 1):
        rows.append(bench.trial(trial))
        log(f"# object store trial {trial}: " + ", ".join(f"{k} {v:.2f}s"
                                                          for k, v in rows[-1].items()))
    box.kubectl("delete", "tj", "--all", "-n", NAMESPACE, "--wait=true")
    return rows


def ours(box: Any, trials: int, hang_trials: int, log: Any
         ) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    results: list[dict[str, float]] = []
    hangs: list[dict[str, float]] = []
    bench = RealBench(box)
    box.kubectl("apply", "--server-side", "-f", "-", input_text=yaml.safe_dump(trainer_job()))
    bench.wait("the trainer running and checkpointing", lambda: bench.running(0) and (
        (bench.job().get("status") or {}).get("checkpoint") or {}).get("latest"), 300)
    for trial in range(1, trials + 1):
        row = bench.trial(trial)
        results.append(row)
        log(f"# real trial {trial}: " + ", ".join(f"{k} {v:.2f}s" for k, v in row.items()))
    box.kubectl("delete", "tj", "--all", "-n", NAMESPACE, "--wait=true")
    wait_until(lambda: not json.loads(box.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json"
                                                  ).stdout)["items"], 120, "its pods gone")
    for trial in range(1, hang_trials + 1):
        row = hang_trial(bench, trial)
        hangs.append(row)
        log(f"# hang trial {trial}: " + ", ".join(f"{k} {v:.2f}s" for k, v in row.items()))
    return results, hangs
