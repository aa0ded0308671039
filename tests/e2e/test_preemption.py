"""Preemption that keeps topology, end to end on KWOK nodes: a high-priority gang that needs
four whole UltraServers preempts the two lower-priority jobs that together free them, not
the four small ones scattered over the other two; the victims save (or run out of grace),
stop, are requeued, and resume from their checkpoints once there is room again."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from goodput_operator.sandbox import fleet as fleets
from goodput_operator.sdk import Reporter
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    OWN_FLEET,
    TRN2_TYPE,
    Operator,
    apply,
    delete_all,
    get_job,
    job_pods,
    own_nodes,
    training_job,
    wait_event,
    wait_phase,
)
from tests.e2e.test_recovery import env_of, worker_token

pytestmark = pytest.mark.e2e
POOL = "preempt"  # the pool of this test's own six UltraServers


@pytest.fixture
def six_ultraservers(crds: Cluster, namespace: str) -> Iterator[str]:
    """Six Trn2 UltraServers of KWOK nodes of the test's own (the session fleet has two),
    one network block, and a group over exactly them; all deleted afterwards, the test's
    jobs and their pods first: a pod left on a deleted node waits for the pod garbage
    collector (40-60 s), which outlasted the jobs' cleanup once on a loaded machine."""
    fleet = fleets.parse({
        "apiVersion": fleets.FLEET_API_VERSION, "kind": fleets.FLEET_KIND,
        "metadata": {"name": OWN_FLEET},
        "spec": {"region": "us-east-2", "zone": "us-east-2a", "pools": [{
            "name": POOL, "instanceType": TRN2_TYPE, "domains": 6, "nodesPerDomain": 4,
            "domainLabel": fleets.ULTRASERVER_LABEL, "domainsPerBlock": 6,
            "capacity": {"cpu": 192, "memory": "2Ti", "pods": 110,
                         "aws.amazon.com/neuron": 16}}]}}, "test")
    group = f"preempt-{uuid.uuid4().hex[:6]}"
    with own_nodes(crds, fleet, POOL):
        try:
            apply(crds, {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
                         "metadata": {"name": group},
                         "spec": {"nodeSelector": {fleets.POOL_LABEL: POOL},
                                  "networkLevels": list(fleets.NETWORK_LAYER_LABELS[:2]),
                                  "accelerator": {"resource": "aws.amazon.com/neuron",
                                                  "perNode": 16},
                                  "nodesPerDomain": 4, "probes": {"schedule": ""}}})
            yield group
        finally:
            delete_all(crds, "tj", namespace)
            crds.kubectl("delete", "usg", group, "--ignore-not-found")


def ultraserver(crds: Cluster, node: str) -> str:
    labels = json.loads(crds.kubectl("get", "node", node, "-o", "json").stdout)[
        "metadata"]["labels"]
    return str(labels[fleets.ULTRASERVER_LABEL])


def reporter(crds: Cluster, e2e: Operator, namespace: str, job: str) -> Reporter:
    rank0 = job_pods(crds, namespace, job)[0]["metadata"]["name"]
    return Reporter(e2e.report_url, worker_token(crds, namespace, rank0))


def placed_nodes(crds: Cluster, namespace: str, job: str) -> list[str]:
    return [p["spec"]["nodeName"] for p in job_pods(crds, namespace, job)]


def test_a_gang_preempts_the_jobs_that_free_whole_ultraservers_and_they_resume(
        e2e: Operator, crds: Cluster, namespace: str, six_ultraservers: str) -> None:
    group = six_ultraservers
    checkpoint = {"dir": "/fsx/ckpt"}
    small = {"s1": f"{POOL}-04-0", "s2": f"{POOL}-04-2", "s3": f"{POOL}-05-0",
             "s4": f"{POOL}-05-2"}  # one node in each half of two UltraServers
    for name, node in small.items():
        apply(crds, training_job(name, group, 1,
                                 nodeSelector={"kubernetes.io/hostname": node}), namespace)
    for name in small:
        wait_phase(crds, namespace, name, "Running")
    apply(crds, training_job("low-a", group, 8, checkpoint=checkpoint), namespace)
    apply(crds, training_job("low-b", group, 8, checkpoint=checkpoint,
                             preemptionGraceSeconds=3), namespace)
    for name in ("low-a", "low-b"):  # the four whole UltraServers left
        wait_phase(crds, namespace, name, "Running")
    held = {name: {ultraserver(crds, n) for n in placed_nodes(crds, namespace, name)}
            for name in ("low-a", "low-b")}
    assert all(len(domains) == 2 for domains in held.values())
    a, b = reporter(crds, e2e, namespace, "low-a"), reporter(crds, e2e, namespace, "low-b")
    a.commit_checkpoint(100, "/fsx/ckpt/step-100")
    b.commit_checkpoint(100, "/fsx/ckpt/step-100")
    small_pods = {name: job_pods(crds, namespace, name)[0]["metadata"]["uid"]
                  for name in small}

    apply(crds, training_job("high", group, 16, priority=100,
                             preemptionPolicy="LowerPriority"), namespace)
    said = wait_event(crds, "high", "Preempting", "preempting", namespace, timeout=30)
    assert f"{namespace}/low-a" in said and f"{namespace}/low-b" in said
    assert all(f"{namespace}/{name}" not in said for name in small), said
    # low-a's workers are asked to save: the next step's answer says so, and it saves
    wait_for(lambda: (get_job(crds, namespace, "low-a")["status"].get("preemption")
                      or {}).get("by") == f"{namespace}/high", timeout=30,
             what="low-a told it is preempted")
    answer = a.report_step(150)
    assert answer["save"]["reason"] == "Preemption" and a.save_request is not None
    a.commit_checkpoint(150, "/fsx/ckpt/step-150")
    for name in ("low-a", "low-b"):  # low-b saves nothing: stopped when its grace is over
        wait_event(crds, name, "Preempted", "requeued", namespace, timeout=30)

    high = wait_phase(crds, namespace, "high", "Running", timeout=90)
    assert {ultraserver(crds, n) for n in placed_nodes(crds, namespace, "high")} == \
        held["low-a"] | held["low-b"], "the freed UltraServers, whole"
    assert len(high["status"]["placement"]["domains"]) == 4
    for name, uid in small_pods.items():  # the scattered small jobs were never touched
        job = get_job(crds, namespace, name)
        assert job["status"]["phase"] == "Running" and job["status"].get("restarts", 0) == 0
        assert job_pods(crds, namespace, name)[0]["metadata"]["uid"] == uid
    for name in ("low-a", "low-b"):
        job = get_job(crds, namespace, name)
        assert job["status"]["phase"] == "Recovering", job["status"]["message"]
        incident = job["status"]["incidents"][-1]
        assert (incident["cause"], incident["action"]) == ("Preemption", "requeue")

    crds.kubectl("delete", "tj", "high", "-n", namespace)  # room again: the victims resume
    for name, step in (("low-a", "150"), ("low-b", "100")):
        job = wait_phase(crds, namespace, name, "Running", timeout=90)
        assert job["status"]["restarts"] == 1
        env = env_of(job_pods(crds, namespace, name)[0])
        assert (env["GOODPUT_RESTART"], env["GOODPUT_RESUME_STEP"]) == ("1", step), name
        reasons = {c["type"]: c["reason"] for c in job["status"]["conditions"]}
        assert reasons["Preempted"] == "Resumed"
        assert job["status"]["goodput"]["lostByCause"].get("Preemption", 0) > 0
