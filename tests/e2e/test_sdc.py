"""Silent data corruption end to end: replicas vote through the SDK, the minority's node
is quarantined with the evidence, the job rolls back to the last verified checkpoint
before the divergence; probe results quarantine and release nodes."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.sdk import Reporter, ReportError
from goodput_operator.topology.record import ranks_of
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    Faults,
    Operator,
    apply,
    get_job,
    job_pods,
    settle,
    training_job,
    trn2_pool,
    wait_event,
)
from tests.e2e.test_recovery import env_of, quarantined, ranks, running_again, worker_token

pytestmark = pytest.mark.e2e
AGREED = "00c0ffee" * 4


def fingerprint_at(step: int, corrupt: bool = False) -> str:
    """What the replicas' fingerprints look like: equal at equal steps, unless corrupt."""
    return f"{step:08x}" * 3 + ("deadbeef" if corrupt else "00c0ffee")


def test_a_diverging_replica_is_quarantined_and_the_job_rolls_back_to_the_last_verified(
        e2e: Operator, crds: Cluster, namespace: str, make_group: Any, faults: Faults) -> None:
    group = make_group(spares={"perDomain": 1})
    apply(crds, training_job("dp3", group, 3, checkpoint={"dir": "/fsx/dp3", "verify": True},
                             sdc={"crossReplicaCheck": True}), namespace)
    job = wait_for(lambda: (j := get_job(crds, namespace, "dp3")).get("status", {})
                   .get("phase") == "Running" and j, timeout=60, what="dp3 Running")
    before = ranks(job)
    workers = {int(p["metadata"]["labels"][names.RANK_LABEL]):
               Reporter(e2e.report_url, worker_token(crds, namespace, p["metadata"]["name"]),
                        job=f"{namespace}/dp3")
               for p in job_pods(crds, namespace, "dp3")}

    def step(number: int, corrupt_rank: int | None = None) -> None:
        for rank, worker in workers.items():
            worker.report_step(number, {"loss": 2.0},
                               fingerprint=fingerprint_at(number, rank == corrupt_rank))

    for number in (100, 200):
        step(number)
        workers[0].commit_checkpoint(number, f"/fsx/dp3/step-{number}")
    workers[0].commit_checkpoint(300, "/fsx/dp3/step-300")
    status = get_job(crds, namespace, "dp3")["status"]
    assert status["checkpoint"]["latestVerified"]["step"] == 200
    assert status["checkpoint"]["latest"]["step"] == 300
    assert status["sdc"]["verifiedStep"] == 200

    step(250, corrupt_rank=2)                            # rank 2's chip goes bad
    suspect = before[2]
    job = running_again(crds, namespace, "dp3", 1)

    body = quarantined(crds, suspect)
    assert body is not None
    evidence = json.loads(body["metadata"]["annotations"][names.EVIDENCE_ANNOTATION])
    assert evidence["reason"] == "SilentDataCorruption"
    assert "rank 2" in evidence["evidence"] and "step 250" in evidence["evidence"]
    assert fingerprint_at(250, True)[:16] in evidence["evidence"]
    # the replicas' vote is the tenant's word: it holds the node for a probe (rule 1 of
    # TENANCY.md), owned by the job, and is no incident of the node's (no lemon score)
    assert evidence["owner"] == f"{namespace}/dp3"
    assert names.LEMON_ANNOTATION not in body["metadata"]["annotations"]

    after = ranks(job)
    assert after[0] == before[0] and after[1] == before[1] and after[2] != suspect
    incident = job["status"]["incidents"][-1]
    assert incident["cause"] == "SilentDataCorruption" and incident["nodes"] == [suspect]
    assert incident["resumeFrom"]["step"] == 200
    assert "rolling back to step 200" in incident["message"]
    assert "first divergent step 250" in incident["message"]
    assert "not the latest, step 300" in incident["message"]
    for pod in job_pods(crds, namespace, "dp3"):
        assert env_of(pod)["GOODPUT_RESUME_FROM"] == "/fsx/dp3/step-200"
    assert "sdc" not in job["status"]                   # the new attempt votes afresh
    assert "goodput_sdc_suspicions_total" in e2e.metrics()


def probe_pod(crds: Cluster, namespace: str, node: str, used: set[str]) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        pods = json.loads(crds.kubectl("get", "pods", "-n", namespace, "-l",
                                       f"{names.PROBE_LABEL}=true", "-o", "json").stdout)["items"]
        for pod in pods:
            if pod["metadata"]["annotations"].get(names.PROBE_NODE_ANNOTATION) == node and \
                    pod["metadata"]["uid"] not in used and pod["spec"].get("nodeName"):
                return pod
        return None
    pod = wait_for(found, timeout=30, what=f"a new probe pod on {node}")
    used.add(pod["metadata"]["uid"])
    return pod


NEURON_RUN = {"ok": True, "backend": "neuron", "devices": [
    {"index": 0, "name": "neuron:0", "digest": "ab", "ok": True}]}  # a clean run on Trn2


def probe_jobs(crds: Cluster, namespace: str, node: str) -> list[dict[str, Any]]:
    jobs = json.loads(crds.kubectl("get", "jobs", "-n", namespace, "-l",
                                   f"{names.PROBE_LABEL}=true", "-o", "json").stdout)["items"]
    return [j for j in jobs if j["metadata"]["annotations"].get(names.PROBE_NODE_ANNOTATION)
            == node]


def test_a_bad_probe_quarantines_the_node_and_clean_probes_release_it(
        e2e: Operator, crds: Cluster, make_group: Any, faults: Faults) -> None:
    """A bad run quarantines; a run on the CPU (the default image on an accelerator node)
    is inconclusive: the node stays out and that image is not run there again; a probe image
    that reaches the Neuron devices then clears it."""
    group = make_group(quarantine={"releaseAfterCleanProbes": 2})
    pool = trn2_pool(crds)
    node, probes, used = pool[7], e2e.probe_namespace, set[str]()
    started = subprocess.run(
        [sys.executable, "-m", "goodput_operator.cli", "node", "probe", node,
         "--namespace", probes, "--kubeconfig", str(crds.kubeconfig)],
        capture_output=True, text=True, timeout=60, check=True)
    assert "probe Job" in started.stdout
    pod = probe_pod(crds, probes, node, used)
    reporter = Reporter(e2e.report_url, worker_token(crds, probes, pod["metadata"]["name"]))
    with pytest.raises(ReportError) as elsewhere:
        reporter.send("probe", {"node": pool[6], "ok": True})
    assert elsewhere.value.status == 403
    reporter.send("probe", {"node": node, "ok": False, "bad": [3], "devices": [
        {"index": 3, "name": "neuron3", "ok": False, "detail": "result 1f2e differs"}]})
    with pytest.raises(ReportError) as twice:
        reporter.send("probe", {"node": node, "ok": True})
    assert twice.value.status == 409

    body = wait_for(lambda: quarantined(crds, node), timeout=30, what=f"{node} quarantined")
    evidence = json.loads(body["metadata"]["annotations"][names.EVIDENCE_ANNOTATION])
    assert evidence["reason"] == "SilentDataCorruption"
    assert "bad device(s) 3 (neuron3): result 1f2e differs" in evidence["evidence"]

    pod = probe_pod(crds, probes, node, used)            # the operator probes the suspect
    assert pod["metadata"]["annotations"][names.PROBE_EXPECTS_ANNOTATION] == "neuron/0"
    token = worker_token(crds, probes, pod["metadata"]["name"])
    answer = Reporter(e2e.report_url, token).send("probe", {
        "node": node, "ok": True, "backend": "numpy", "devices": [
            {"index": 0, "name": "cpu:0", "ok": True}, {"index": 1, "name": "cpu:1", "ok": True}]})
    assert "not on the node's neuron devices" in answer["inconclusive"]
    answered = pod["metadata"]["labels"]["job-name"]
    wait_event(crds, node, "ProbeInconclusive", "ran on numpy (cpu)")

    def said() -> dict[str, Any] | None:
        status = json.loads(crds.kubectl("get", "usg", group, "-o", "json").stdout)["status"]
        found = next((c for c in status["conditions"] if c["type"] == "ProbesInconclusive"),
                     {})
        return found if found.get("status") == "True" else None
    assert node in wait_for(said, timeout=30, what="ProbesInconclusive")["message"]
    settle(e2e)
    assert quarantined(crds, node) is not None           # proved nothing: still out
    runs = sorted((j["metadata"]["name"] for j in probe_jobs(crds, probes, node)
                   if j["metadata"]["labels"][names.PROBE_TRIGGER_LABEL] == "suspicion"),
                  key=lambda name: int(name.rsplit("suspi", 1)[1]))
    assert runs[-1] == answered                          # nor probed again with that image

    crds.kubectl("patch", "usg", group, "--type=merge",  # an image that reaches the device
                 "-p", json.dumps({"spec": {"probes": {"image": "probes:neuron"}}}))
    for _ in range(2):
        pod = probe_pod(crds, probes, node, used)
        assert pod["metadata"]["labels"][names.PROBE_TRIGGER_LABEL] == "suspicion"
        assert pod["spec"]["containers"][0]["image"] == "probes:neuron"
        token = worker_token(crds, probes, pod["metadata"]["name"])
        assert quarantined(crds, node) is not None       # not released before the last one
        Reporter(e2e.report_url, token).send("probe", {"node": node, **NEURON_RUN})
    wait_for(lambda: quarantined(crds, node) is None, timeout=30, what=f"{node} released")
    wait_for(lambda: said() is None, timeout=30, what="ProbesInconclusive cleared")
    wait_event(crds, node, "Released", "2 clean probe runs")


def test_idle_nodes_are_probed_on_the_groups_schedule(
        e2e: Operator, crds: Cluster, make_group: Any) -> None:
    group = make_group(probes={"schedule": "* * * * *"})     # every minute

    def swept() -> list[dict[str, Any]] | None:
        jobs = json.loads(crds.kubectl("get", "jobs", "-n", e2e.probe_namespace, "-l",
                                       f"{names.PROBE_TRIGGER_LABEL}=schedule", "-o", "json")
                          .stdout)["items"]
        return jobs or None
    try:
        jobs = wait_for(swept, timeout=90, what="a scheduled probe sweep")
        probed = {j["metadata"]["annotations"][names.PROBE_NODE_ANNOTATION] for j in jobs}
        assert probed <= set(trn2_pool(crds)), "only the group's (idle) nodes"
        status = json.loads(crds.kubectl("get", "usg", group, "-o", "json").stdout)["status"]
        scheduled = next(c for c in status["conditions"] if c["type"] == "ProbesScheduled")
        assert scheduled["status"] == "True" and "* * * * *" in scheduled["message"]
    finally:
        crds.kubectl("delete", "usg", group, "--wait=true")  # no sweep after this one
        crds.kubectl("delete", "jobs", "-n", e2e.probe_namespace, "-l",
                     f"{names.PROBE_TRIGGER_LABEL}=schedule")


def test_probe_on_start_lets_workers_go_only_after_their_nodes_pass(
        e2e: Operator, crds: Cluster, namespace: str, make_group: Any) -> None:
    group = make_group()
    apply(crds, training_job("careful", group, 2, sdc={"probeOnStart": True}), namespace)

    def probing() -> dict[str, Any] | None:
        status = get_job(crds, namespace, "careful").get("status") or {}
        return status if "probing 2 placed node(s)" in status.get("message", "") else None
    status = wait_for(probing, timeout=30, what="careful probing its nodes")
    nodes = sorted(r["node"] for r in ranks_of(status["placement"]))
    assert all(p["spec"].get("schedulingGates") for p in job_pods(crds, namespace, "careful"))
    used: set[str] = set()
    for node in nodes:
        pod = probe_pod(crds, e2e.probe_namespace, node, used)
        assert pod["metadata"]["labels"][names.PROBE_TRIGGER_LABEL] == "start"
        token = worker_token(crds, e2e.probe_namespace, pod["metadata"]["name"])
        Reporter(e2e.report_url, token).send("probe", {"node": node, **NEURON_RUN})
    wait_for(lambda: get_job(crds, namespace, "careful")["status"].get("phase") == "Running",
             timeout=30, what="careful Running after its probes")
