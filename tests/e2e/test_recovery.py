"""Surviving failures: quarantine with evidence, spares, moving the gang, waiting, restart
budgets, the storm guard, and the authenticated report channel — on the sandbox's Trn2
UltraServers (2 x 4 nodes), with the operator as a real process."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goodput_operator import cli, names
from goodput_operator.sandbox.cluster import kubectl_binary
from goodput_operator.sdk import Reporter, ReportError, checkpoint
from goodput_operator.sdk.objectstore import ObjectStore
from goodput_operator.times import parse
from goodput_operator.topology.record import ranks_of
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    Faults,
    Operator,
    apply,
    get_job,
    job_pods,
    sandbox_cli,
    settle,
    training_job,
    trn2_pool,
    wait_event,
    wait_phase,
)

pytestmark = pytest.mark.e2e


def node(cluster: Cluster, name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(cluster.kubectl("get", "node", name, "-o",
                                                        "json").stdout)
    return result


def quarantined(cluster: Cluster, name: str) -> dict[str, Any] | None:
    body = node(cluster, name)
    taint = next((t for t in body["spec"].get("taints") or []
                  if t["key"] == names.QUARANTINE_TAINT), None)
    return body if taint else None


def group_status(cluster: Cluster, name: str) -> dict[str, Any]:
    status: dict[str, Any] = json.loads(cluster.kubectl("get", "usg", name, "-o", "json")
                                        .stdout).get("status") or {}
    return status


def ranks(job: dict[str, Any]) -> dict[int, str]:
    return {r["rank"]: r["node"] for r in ranks_of(job["status"]["placement"])}


def ranked_nodes(job: dict[str, Any]) -> list[str]:
    """The job's placed nodes in rank order."""
    return [node for _, node in sorted(ranks(job).items())]


def running_again(cluster: Cluster, namespace: str, name: str, restarts: int,
                  timeout: float = 60) -> dict[str, Any]:
    """The job at RESTARTS with every worker of that attempt Running."""
    def reached() -> dict[str, Any] | None:
        job = get_job(cluster, namespace, name)
        status = job.get("status") or {}
        pods = job_pods(cluster, namespace, name)
        if status.get("restarts") == restarts and status.get("phase") == "Running" and \
                all(p["status"].get("phase") == "Running" and
                    p["metadata"]["labels"][names.RESTART_LABEL] == str(restarts)
                    for p in pods):
            return job
        return None
    try:
        return wait_for(reached, timeout=timeout, what=f"{name} running at restart {restarts}")
    except AssertionError as err:
        status = get_job(cluster, namespace, name).get("status")
        pods = [(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"),
                 p["status"].get("conditions")) for p in job_pods(cluster, namespace, name)]
        raise AssertionError(f"{err}; status: {json.dumps(status)}; pods: {pods}") from None


def worker_token(cluster: Cluster, namespace: str, pod: str,
                 audience: str = names.REPORT_AUDIENCE) -> str:
    """What the kubelet mounts into the worker: a token bound to its pod (KWOK runs no
    kubelet, so the test asks the TokenRequest API itself, as the kubelet would)."""
    uid = json.loads(cluster.kubectl("get", "pod", pod, "-n", namespace, "-o", "json")
                     .stdout)["metadata"]["uid"]
    wait_for(lambda: cluster.kubectl("get", "sa", "default", "-n", namespace,
                                     check=False).returncode == 0,
             timeout=30, what="default service account")
    return str(cluster.kubectl("create", "token", "default", "-n", namespace, "--audience",
                               audience, "--bound-object-kind", "Pod", "--bound-object-name",
                               pod, "--bound-object-uid", uid).stdout.strip())


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def test_a_failed_node_is_quarantined_and_the_spare_of_its_ultraserver_takes_its_rank(
        e2e: Operator, crds: Cluster, namespace: str, make_group: Any, faults: Faults) -> None:
    group = make_group(spares={"perDomain": 1})
    apply(crds, training_job("llama", group, 3, checkpoint={"dir": "/fsx/llama"}), namespace)
    job = wait_phase(crds, namespace, "llama", "Running")
    before = ranks(job)
    domain = job["status"]["placement"]["domains"][0]
    spare = next(d["spares"] for d in group_status(crds, group)["domains"] if d["id"] == domain)
    assert len(spare) == 1 and spare[0] not in before.values()

    rank0 = job_pods(crds, namespace, "llama")[0]["metadata"]["name"]
    reporter = Reporter(e2e.report_url, worker_token(crds, namespace, rank0))
    reporter.commit_checkpoint(1200, "/fsx/llama/step-1200", "sha256:0123", save_seconds=1.5)
    wait_for(lambda: ((get_job(crds, namespace, "llama")["status"].get("checkpoint") or {})
                      .get("latest") or {}).get("step") == 1200, timeout=10,
             what="checkpoint in status")
    status = get_job(crds, namespace, "llama")["status"]
    committed = parse(status["checkpoint"]["latest"]["time"]) or 0.0
    ran = committed - (parse(status["goodput"]["since"]) or 0.0)
    stall = round(min(1.5, ran), 3)                 # never more than the gang has run
    wait_for(lambda: (get_job(crds, namespace, "llama")["status"]["goodput"]
                      .get("lostSeconds") or {}).get("checkpoint") == stall, timeout=10,
             what="the save's stall taken from the productive time")

    victim = before[1]
    passes = pass_buckets(e2e)
    faults.fail(victim)
    job = running_again(crds, namespace, "llama", 1)

    after = ranks(job)
    assert after == {**before, 1: spare[0]}         # the failed rank moved, the others stayed
    assert job["status"]["placement"]["domains"] == [domain]
    body = quarantined(crds, victim)
    assert body is not None
    taint = next(t for t in body["spec"]["taints"] if t["key"] == names.QUARANTINE_TAINT)
    assert (taint["value"], taint["effect"]) == ("NodeNotReady", "NoSchedule")
    assert body["metadata"]["labels"][names.QUARANTINE_LABEL] == "NodeNotReady"
    evidence = json.loads(body["metadata"]["annotations"][names.EVIDENCE_ANNOTATION])
    assert evidence["reason"] == "NodeNotReady" and "SimulatedFailure" in evidence["evidence"]
    assert evidence["by"] == "operator" and evidence["at"] >= evidence["since"]

    incident = job["status"]["incidents"][-1]
    assert incident["cause"] == "NodeFailure" and incident["nodes"] == [victim]
    assert incident["action"] == "replace" and incident["restart"] == 1
    assert incident["resumeFrom"]["step"] == 1200
    for phase in ("detection", "replacement", "restart", "lostWork"):
        assert incident[f"{phase}Seconds"] >= 0
    assert incident["detectionSeconds"] >= 5         # the policy's NotReady grace period
    goodput = job["status"]["goodput"]
    assert goodput["lostByCause"]["NodeFailure"] > 0
    assert goodput["lostSeconds"]["launch"] > 0 and "queueing" in goodput["idleSeconds"]
    for pod in job_pods(crds, namespace, "llama"):
        env = env_of(pod)
        assert env["GOODPUT_RESTART"] == "1"
        assert env["GOODPUT_RESUME_FROM"] == "/fsx/llama/step-1200"

    wait_event(crds, victim, "Quarantined", "NodeNotReady")
    status = group_status(crds, group)
    entry = next(d for d in status["domains"] if d["id"] == domain)
    assert entry["quarantinedNodes"] == [victim] and entry["health"] == "Degraded"
    assert status["totals"]["quarantined"] == 1
    assert "goodput_recovery_seconds_count" in e2e.metrics()
    accounted_in_full(crds, group, namespace, slowest_pass(e2e, passes))


def test_a_drain_waits_for_the_save_its_cordon_asks_for_then_ends_without_an_eviction(
        e2e: Operator, crds: Cluster, namespace: str, make_group: Any, faults: Faults,
        tmp_path: Path) -> None:
    """A real `kubectl drain` of rank 1's node: it cordons the node (a Drain notice) and
    asks to evict the worker, which the gang's disruption budget refuses while the gang
    has not saved; once a checkpoint commits, the operator moves the rank to the spare
    (deleting the pod, which no budget holds back), the drain finds nothing left and ends,
    and the gang resumes from that save. Nothing was evicted: the incident is a Notice."""
    group = make_group(spares={"perDomain": 1})
    apply(crds, training_job("drained", group, 2, checkpoint={"dir": "/fsx/d"}), namespace)
    job = wait_phase(crds, namespace, "drained", "Running")
    before = ranks(job)
    victim = before[1]

    def budget() -> dict[str, Any]:
        found: dict[str, Any] = json.loads(crds.kubectl(
            "get", "pdb", "drained", "-n", namespace, "-o", "json").stdout)
        return found
    held = wait_for(lambda: (b := budget()).get("status", {}).get("currentHealthy") == 2 and b,
                    timeout=30, what="the disruption controller counting the gang")
    assert held["status"]["disruptionsAllowed"] == 0
    assert held["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]

    said = tmp_path / "drain.err"
    with draining(crds, victim, said) as drain:
        wait_for(lambda: "disruption budget" in said.read_text(), timeout=30,
                 what=f"the drain's eviction refused by the budget: {said.read_text()}")
        notice = wait_for(lambda: get_job(crds, namespace, "drained")["status"]
                          .get("notice"), timeout=30, what="the Drain notice")
        assert notice["node"] == victim and notice["kind"] == "Drain", notice
        assert get_job(crds, namespace, "drained")["status"].get("restarts", 0) == 0
        assert drain.poll() is None, "the drain waits for the save"
        commit(e2e, crds, namespace, "drained", 300, "/fsx/d/step-300")
        job = running_again(crds, namespace, "drained", 1)
        out, _ = drain.communicate(timeout=60)
    incident = drained_to_the_spare(drain, out, said, job, before)
    assert incident["resumeFrom"]["step"] == 300 and "saved at step 300" in \
        incident["message"], incident


def test_a_drain_of_a_gang_that_never_saves_waits_no_longer_than_the_groups_deadline(
        e2e: Operator, crds: Cluster, namespace: str, make_group: Any, tmp_path: Path) -> None:
    """A tenant's workers that ignore the save a drain's cordon asks for (these never
    report) hold the admin's drain no longer than the group's noticeDeadlineSeconds for a
    drain (here 10 s; 600 by default): then the node counts as lost to the job, the rank
    moves to the spare, the drain ends, and the gang resumes from the checkpoint it had
    before the notice. The incident says the deadline passed unsaved."""
    group = make_group(spares={"perDomain": 1}, noticeDeadlineSeconds={"drain": 10})
    apply(crds, training_job("deaf", group, 2, checkpoint={"dir": "/fsx/deaf"}), namespace)
    before = ranks(wait_phase(crds, namespace, "deaf", "Running"))
    victim = before[1]
    commit(e2e, crds, namespace, "deaf", 100, "/fsx/deaf/step-100")  # before the notice
    wait_for(lambda: (get_job(crds, namespace, "deaf")["status"].get("checkpoint") or {})
             .get("latest"), timeout=30, what="the checkpoint from before the notice")
    said = tmp_path / "drain.err"
    with draining(crds, victim, said) as drain:
        notice = wait_for(lambda: get_job(crds, namespace, "deaf")["status"].get("notice"),
                          timeout=30, what="the Drain notice")
        assert notice["node"] == victim and notice["kind"] == "Drain", notice
        assert (parse(notice["deadline"]) or 0) - (parse(notice["since"]) or 0) == \
            pytest.approx(10, abs=0.01), notice
        job = running_again(crds, namespace, "deaf", 1)
        out, _ = drain.communicate(timeout=60)
    incident = drained_to_the_spare(drain, out, said, job, before)
    assert "the deadline passed unsaved" in incident["message"], incident
    assert incident["resumeFrom"]["step"] == 100, incident
    assert incident["failedAt"] == notice["deadline"], "lost at the deadline, not before"


def drained_to_the_spare(drain: subprocess.Popen[str], out: str, said: Path,
                         job: dict[str, Any], before: dict[int, str]) -> dict[str, Any]:
    """The drain of rank 1's node (BEFORE: the ranks' nodes then) ended well, rank 1 moved
    off it and rank 0 stayed; the job's last incident, a Notice on that node."""
    victim = before[1]
    assert drain.returncode == 0, said.read_text()
    assert f"node/{victim} drained" in out
    after = ranks(job)
    assert after[0] == before[0] and after[1] not in before.values()
    incident: dict[str, Any] = job["status"]["incidents"][-1]
    assert incident["cause"] == "Notice" and incident["nodes"] == [victim], incident
    return incident


@contextlib.contextmanager
def draining(cluster: Cluster, node: str, said: Path) -> Iterator[subprocess.Popen[str]]:
    """`kubectl drain NODE` running, as an admin runs it (its stderr in SAID); killed if
    still running after, and the node uncordoned."""
    with said.open("w") as err, subprocess.Popen(
            [kubectl_binary(), "--kubeconfig", str(cluster.kubeconfig), "drain", node,
             "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=120s"],
            stdout=subprocess.PIPE, stderr=err, text=True) as drain:
        try:
            yield drain
        finally:
            if drain.poll() is None:
                drain.kill()
            cluster.kubectl("uncordon", node, check=False)


def commit(e2e: Operator, cluster: Cluster, namespace: str, job: str, step: int,
           path: str) -> None:
    """Rank 0 of JOB reports checkpoint STEP at PATH committed, as the SDK's save does."""
    rank0 = next(p for p in job_pods(cluster, namespace, job)
                 if p["metadata"]["labels"][names.RANK_LABEL] == "0")
    Reporter(e2e.report_url, worker_token(cluster, namespace, rank0["metadata"]["name"])
             ).commit_checkpoint(step, path, f"sha256:{step:04d}")


def report(cluster: Cluster, group: str) -> dict[str, Any]:
    """`goodput report --json` for GROUP, as a user runs it."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["report", "--json", "--group", group, "--kubeconfig",
                         str(cluster.kubeconfig)]) == 0
    found: dict[str, Any] = json.loads(out.getvalue())["groups"][0]
    return found


def pass_buckets(e2e: Operator) -> dict[float, float]:
    """The operator's passes so far by the bound of their histogram bucket (cumulative:
    upper bound -> passes at most that long)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {float(sample.labels["le"]): sample.value
            for family in text_string_to_metric_families(e2e.metrics())
            for sample in family.samples
            if sample.name == "goodput_reconcile_pass_seconds_bucket"}


def slowest_pass(e2e: Operator, before: dict[float, float]) -> float:
    """The longest pass since BEFORE (pass_buckets), to its bucket's bound: how late a
    pass may have seen a stretch of the job's begin or end."""
    now = pass_buckets(e2e)
    since = {bound: count - before.get(bound, 0.0) for bound, count in now.items()}
    total = since.get(float("inf"), 0.0)
    return min((bound for bound, count in since.items() if count >= total),
               default=float("inf"))


def accounted_in_full(cluster: Cluster, group: str, namespace: str,
                      slowest: float) -> None:
    """Every accelerator-second of GROUP in one state, the states adding up to the whole at
    each read; once written (at most a minute apart): the failed node's quarantine, the
    two healthy ranks' wait for the lost one as detection (what the job's books say times
    their 32 accelerators, give or take the passes that saw it begin and end: a second,
    or the SLOWEST pass's length at each edge where passes took longer),
    and the work redone after the restart moved from productive: the job's books times
    the 48 accelerators that did it, or less where the group had counted less of it
    productive (the passes see a stretch begin a little after the books do, and this
    job ran for about a second before its node failed)."""
    last: list[dict[str, Any]] = []
    seen = 32 * max(1.0, 2 * slowest)  # accelerator-seconds: a pass late at either edge

    def told() -> dict[str, Any] | None:
        found = report(cluster, group)
        books = get_job(cluster, namespace, "llama")["status"]["goodput"]["lostSeconds"]
        last[:] = [found, books]
        assert found["accounted"] == pytest.approx(found["acceleratorSeconds"], abs=0.05)
        mine = next((n for n in found["namespaces"] if n["namespace"] == namespace), {})
        badput = mine.get("badput") or {}
        return found if found["rows"]["quarantined"] > 0 and mine["productive"] > 0 and \
            badput.get("detection") == pytest.approx(books["detection"] * 32, abs=seen) and \
            0 < badput.get("lostWork", 0) <= books["lostWork"] * 48 + 0.01 else None
    try:
        found = wait_for(told, timeout=90, what="the quarantine and the badput in the accounting")
    except AssertionError as err:
        raise AssertionError(f"{err}; the report and the job's books: {json.dumps(last)}; "
                             f"the slowest pass since the failure: {slowest} s") from None
    assert found["rows"]["idle"] > 0 and found["jobs"][0]["acceleratorSeconds"] > 0


def test_two_failures_move_the_gang_and_a_job_with_no_placement_left_waits_for_a_heal(
        e2e: Operator, crds: Cluster, namespace: str, make_group: Any, faults: Faults) -> None:
    group = make_group(spares={"perDomain": 1},
                       quarantine={"maxUnavailable": "50%", "releaseAfterHealthySeconds": 1})
    # maxRestarts 1: three node failures are the platform's, paid by the other budget
    apply(crds, training_job("llama", group, 3, failurePolicy={"maxRestarts": 1}), namespace)
    job = wait_phase(crds, namespace, "llama", "Running")
    first = job["status"]["placement"]["domains"][0]

    faults.fail(*list(ranks(job).values())[:2])     # two nodes of one UltraServer together
    job = running_again(crds, namespace, "llama", 1)
    second = job["status"]["placement"]["domains"]
    assert second != [first] and len(second) == 1  # the whole gang moved, still one domain
    assert job["status"]["incidents"][-1]["action"] == "move"

    faults.fail(ranks(job)[0])                     # one more: the new domain's spare takes it
    job = running_again(crds, namespace, "llama", 2)
    assert job["status"]["placement"]["domains"] == second
    assert job["status"]["incidents"][-1]["action"] == "replace"

    last = ranks(job)[2]
    faults.fail(last)                              # no domain has three healthy nodes left
    def waiting() -> dict[str, Any] | None:
        job = get_job(crds, namespace, "llama")
        status = job.get("status") or {}
        placed = next((c for c in status.get("conditions") or [] if c["type"] == "Placed"), {})
        return job if status.get("phase") == "Recovering" and status.get("restarts") == 3 \
            and placed.get("reason") == "WaitingForCapacity" else None
    job = wait_for(waiting, timeout=60, what="the job waiting for capacity")
    assert "UltraServer" in job["status"]["message"]
    assert job_pods(crds, namespace, "llama") == [], "a gang that waits has no pods"

    faults.heal(last)                              # healthy for 1 s -> released -> resumes
    job = running_again(crds, namespace, "llama", 3)
    assert quarantined(crds, last) is None
    assert job["status"]["incidents"][-1]["action"] == "wait"
    assert len(job["status"]["placement"]["domains"]) == 1
    assert job["status"]["restartsByBudget"] == {"infrastructure": 3}


def test_an_application_error_restarts_without_quarantine_until_the_budget_is_spent(
        e2e: Operator, crds: Cluster, namespace: str, make_group: Any, faults: Faults) -> None:
    group = make_group()
    apply(crds, training_job("flaky", group, 2, failurePolicy={
        "maxRestarts": 1, "backoff": {"initialSeconds": 1, "maxSeconds": 2}}), namespace)
    wait_phase(crds, namespace, "flaky", "Running")
    victim = job_pods(crds, namespace, "flaky")[1]
    sandbox_cli(crds, "fail-pod", victim["metadata"]["name"], "--exit-code", "1",
                "-n", namespace)
    job = running_again(crds, namespace, "flaky", 1)
    incident = job["status"]["incidents"][-1]
    assert incident["cause"] == "ApplicationError" and incident["nodes"] == []
    assert incident["action"] == "restart" and "restartAt" in incident
    assert quarantined(crds, victim["spec"]["nodeName"]) is None
    assert ranks(job)[1] == victim["spec"]["nodeName"]   # same nodes again
    assert job["status"]["restartsByBudget"] == {"application": 1}

    again = job_pods(crds, namespace, "flaky")[0]["metadata"]["name"]
    sandbox_cli(crds, "fail-pod", again, "--exit-code", "1", "-n", namespace)
    job = wait_phase(crds, namespace, "flaky", "Failed")
    assert "the application restart budget of 1 is used up (ApplicationError)" in \
        job["status"]["message"]
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "RestartBudgetExhausted"


def test_failing_most_of_a_group_at_once_trips_the_storm_guard(
        e2e: Operator, crds: Cluster, make_group: Any, faults: Faults) -> None:
    group = make_group()                           # maxUnavailable 20%: 2 of 8 nodes
    pool = trn2_pool(crds)
    victims = [*pool[0:3], *pool[4:6]]  # three of one UltraServer, two of the other
    wait_for(lambda: group_status(crds, group).get("health") == "Healthy", timeout=30,
             what="group healthy")
    faults.fail(*victims)

    def tripped() -> dict[str, Any] | None:
        status = group_status(crds, group)
        guard = next((c for c in status.get("conditions") or []
                      if c["type"] == "StormGuard"), {})
        return guard if guard.get("status") == "True" else None
    guard = wait_for(tripped, timeout=30, what="StormGuard condition")
    assert guard["reason"] == "TooManyFailing"
    assert "5 node(s) failing" in guard["message"] and "maxUnavailable=20%" in guard["message"]
    settle(e2e)
    assert [v for v in victims if quarantined(crds, v)] == []
    wait_event(crds, group, "StormGuard", "quarantining none", namespace="default")

    faults.heal(*victims)
    wait_for(lambda: not tripped(), timeout=30, what="StormGuard cleared")


def test_what_cloud_health_agents_say_quarantines_a_node_at_once_with_their_evidence(
        e2e: Operator, crds: Cluster, make_group: Any, faults: Faults) -> None:
    """The EKS node monitoring agent's AcceleratedHardwareReady=False, SageMaker HyperPod's
    node-health-status label and a DRA driver's taint on one of a node's devices: the node
    stays Ready, and is quarantined anyway, without the NotReady grace period, its evidence
    naming the agent and the failure class."""
    group = make_group(quarantine={"notReadyGraceSeconds": 30, "maxUnavailable": 3})
    gpu, hyperpod, device = trn2_pool(crds)[1], trn2_pool(crds)[6], trn2_pool(crds)[3]
    wait_for(lambda: group_status(crds, group).get("health") == "Healthy", timeout=30,
             what="group healthy")
    faults.fail(gpu, signal="accelerated-hardware")
    faults.fail(hyperpod, signal="hyperpod")
    faults.fail(device, signal="device-taint")       # on a device of its ResourceSlice
    for victim, reason, failure_class, said in (
            (gpu, "NodeCondition", "accelerator", "condition AcceleratedHardwareReady=False"),
            (hyperpod, "HealthLabel", "node", "label sagemaker.amazonaws.com/node-health-status"
                                              "=UnschedulablePendingReplacement"),
            (device, "DeviceTaint", "accelerator", "device neuron-device-0 (neuron.aws.com) "
                                                   "tainted sandbox.goodput.dev/unhealthy")):
        body = wait_for(lambda v=victim: quarantined(crds, v), timeout=20,  # not 30 s of grace
                        what=f"{victim} quarantined")
        evidence = json.loads(body["metadata"]["annotations"][names.EVIDENCE_ANNOTATION])
        assert (evidence["reason"], evidence["class"]) == (reason, failure_class)
        assert evidence["evidence"].startswith(said)
        assert body["metadata"]["labels"][names.QUARANTINE_LABEL] == reason
        ready = next(c for c in body["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"              # Kubernetes alone would see nothing
        wait_event(crds, victim, "Quarantined", said)
        if victim == gpu:
            assert "EKS node monitoring agent" in evidence["evidence"]
    assert 'failure_class="accelerator"' in e2e.metrics()

    faults.heal(gpu, hyperpod, device)             # the agents say healthy again
    healed = node(crds, gpu)
    assert next(c["status"] for c in healed["status"]["conditions"]
                if c["type"] == "AcceleratedHardwareReady") == "True"
    assert node(crds, hyperpod)["metadata"]["labels"][
        "sagemaker.amazonaws.com/node-health-status"] == "Schedulable"
    slices = json.loads(crds.kubectl("get", "resourceslices", "--field-selector",
                                     f"spec.nodeName={device}", "-o", "json").stdout)["items"]
    assert slices and not any(d.get("taints") for s in slices for d in s["spec"]["devices"])


def test_reports_are_accepted_only_from_the_jobs_own_current_workers(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str) -> None:
    apply(crds, training_job("alpha", trn2_group, 1), namespace)
    apply(crds, training_job("beta", trn2_group, 1, checkpoint={"dir": "/ckpt"}), namespace)
    wait_phase(crds, namespace, "alpha", "Running")
    wait_phase(crds, namespace, "beta", "Running")
    beta_pod = job_pods(crds, namespace, "beta")[0]["metadata"]["name"]
    beta_token = worker_token(crds, namespace, beta_pod)

    def refused(reporter: Reporter, **body: Any) -> int | None:
        try:
            reporter.send("checkpoint", {"step": 5, "path": "/x", "job": reporter.job, **body})
        except ReportError as err:
            return err.status
        return None

    url = e2e.report_url
    assert refused(Reporter(url, beta_token, job=f"{namespace}/alpha")) == 403
    assert refused(Reporter(url, "")) == 401
    assert refused(Reporter(url, "not-a-token")) == 401
    assert refused(Reporter(url, worker_token(crds, namespace, beta_pod, "other"))) == 401
    assert refused(Reporter(url, beta_token), step=-1) == 400
    assert refused(Reporter(url, beta_token), unexpected=True) == 400
    assert refused(Reporter(url, beta_token), path="/ckpt/../alpha/5") == 400  # not beta's
    assert "latest" not in (get_job(crds, namespace, "alpha")["status"].get("checkpoint") or {})
    assert "latest" not in (get_job(crds, namespace, "beta")["status"].get("checkpoint") or {})

    Reporter(url, beta_token, job=f"{namespace}/beta").commit_checkpoint(7, "/ckpt/7")
    Reporter(url, beta_token).report_step(8, {"loss": 1.5})
    def recorded() -> dict[str, Any] | None:
        status = get_job(crds, namespace, "beta")["status"]
        return status if status.get("progress", {}).get("step") == 8 else None
    status = wait_for(recorded, timeout=10, what="beta's progress")
    assert status["checkpoint"]["latest"]["step"] == 7
    assert status["progress"]["metrics"] == {"loss": 1.5}
    assert "latest" not in (get_job(crds, namespace, "alpha")["status"].get("checkpoint") or {})


def test_a_checkpoint_a_worker_finds_corrupt_is_never_resumed_from(
        e2e: Operator, crds: Cluster, namespace: str, make_group: Any, faults: Faults) -> None:
    """checkpoint digests are honoured end to end: a worker whose load finds the newest
    checkpoint changed since its commit says so (sdk.checkpoint.verified), and the next
    restart resumes from the one before it."""
    group = make_group(spares={"perDomain": 1})
    apply(crds, training_job("ckpt", group, 2, checkpoint={"dir": "/fsx/ckpt"}), namespace)
    job = wait_phase(crds, namespace, "ckpt", "Running")
    rank0 = job_pods(crds, namespace, "ckpt")[0]["metadata"]["name"]
    reporter = Reporter(e2e.report_url, worker_token(crds, namespace, rank0))
    reporter.commit_checkpoint(100, "/fsx/ckpt/step-100", "sha256:100")
    reporter.commit_checkpoint(200, "/fsx/ckpt/step-200", "sha256:200")
    reporter.report_corrupt(200, "/fsx/ckpt/step-200", "digest sha256:bad, committed sha256:200")
    checkpoint = get_job(crds, namespace, "ckpt")["status"]["checkpoint"]
    assert checkpoint["latest"]["step"] == 100
    assert [h["step"] for h in checkpoint["history"] if h.get("corrupt")] == [200]
    wait_event(crds, "ckpt", "CheckpointCorrupt", "restarts resume from /fsx/ckpt/step-100",
               namespace=namespace)
    with pytest.raises(ReportError) as refused:       # only the job's own checkpoints
        reporter.report_corrupt(300, "/fsx/ckpt/step-300", "x")
    assert refused.value.status == 404

    faults.fail(ranks(job)[1])
    job = running_again(crds, namespace, "ckpt", 1)
    assert job["status"]["incidents"][-1]["resumeFrom"]["step"] == 100
    for pod in job_pods(crds, namespace, "ckpt"):
        assert env_of(pod)["GOODPUT_RESUME_FROM"] == "/fsx/ckpt/step-100"


def test_a_job_saves_to_the_sandbox_s3_server_and_resumes_from_it_after_a_failure(
        e2e: Operator, crds: Cluster, namespace: str, make_group: Any, faults: Faults,
        object_store: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """checkpoint.dir s3://...: the workers get the Secret's keys; rank 0 saves through the
    SDK to the real S3 server and commits; a node fails; the replacement's resume point is
    that object store step, and it loads it on another node, bit for bit."""
    group = make_group(spares={"perDomain": 1})
    crds.kubectl("create", "secret", "generic", "store", "-n", namespace,
                 *(f"--from-literal={k}={v}" for k, v in object_store.env().items()))
    apply(crds, training_job("gpt", group, 2, checkpoint={
        "dir": "s3://ckpt/gpt", "credentialsSecret": "store"}), namespace)
    job = wait_phase(crds, namespace, "gpt", "Running")
    rank0 = job_pods(crds, namespace, "gpt")[0]
    keys = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in rank0["spec"]["containers"][0]
            ["env"] if "valueFrom" in e and e["name"].startswith("AWS_")}
    assert keys["AWS_SECRET_ACCESS_KEY"] == {"name": "store", "key": "AWS_SECRET_ACCESS_KEY",
                                             "optional": False}

    for key, value in object_store.env().items():  # what the kubelet gives the worker
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GOODPUT_CHECKPOINT_LOCAL", str(tmp_path / "rank0-node"))
    ObjectStore.from_env().create_bucket("ckpt")
    state = os.urandom(1 << 20)
    reporter = Reporter(e2e.report_url, worker_token(crds, namespace,
                                                     rank0["metadata"]["name"]))
    _, digest = checkpoint.save(40, lambda folder: (folder / "model.bin").write_bytes(state),
                                root=env_of(rank0)["GOODPUT_CHECKPOINT_DIR"], reporter=reporter)
    latest = get_job(crds, namespace, "gpt")["status"]["checkpoint"]["latest"]
    assert (latest["path"], latest["digest"]) == ("s3://ckpt/gpt/step-00000040", digest)

    faults.fail(ranks(job)[1])
    job = running_again(crds, namespace, "gpt", 1)
    assert job["status"]["incidents"][-1]["resumeFrom"]["path"] == latest["path"]
    moved = next(p for p in job_pods(crds, namespace, "gpt")
                 if p["metadata"]["labels"][names.RANK_LABEL] == "1")
    monkeypatch.setenv("GOODPUT_CHECKPOINT_LOCAL", str(tmp_path / "spare-node"))
    point = checkpoint.resume_point(env_of(moved))
    assert point is not None and (point.step, point.path) == (40, latest["path"])
    loaded = checkpoint.verified(point, reporter)
    assert loaded.is_relative_to(tmp_path / "spare-node")  # fetched from the store
    assert (loaded / "model.bin").read_bytes() == state
