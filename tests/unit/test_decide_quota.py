"""TrainingJobs under Kueue (decide.quota): gated until their Workload is admitted, placed on
the admitted flavors' nodes, stopped and requeued on an eviction, their Workload finished
with them; jobs without a queue are untouched; a job MultiKueue runs elsewhere only gets
its Workload here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from goodput_operator.api.trainingjob import TrainingJobSpec, TrainingJobStatus
from goodput_operator.decide import JobDecision, decide_jobs, trial
from goodput_operator.decide.priority import (
    PRIORITY_CLASS,
    WORKLOAD_PRIORITY_CLASS,
    Classes,
    PriorityClass,
)
from goodput_operator.decide.types import Refusal
from goodput_operator.resources import workload as kueue
from goodput_operator.resources.fabric import Fabric
from goodput_operator.times import millis
from goodput_operator.topology.record import ranks_of
from tests.unit.fleets import US
from tests.unit.world import NOW, conditions, job, nodes, placed, worker, world

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
QUEUED = {"labels": {kueue.QUEUE_LABEL: "team-a"}}
TRN2_LABELS = {"pool": "trn2"}  # what the world's nodes carry


def queued(name: str = "j", status: Obj | None = None, **spec: Any) -> Obj:
    body = job(name, status, **spec)
    body["metadata"].update(QUEUED)
    return body


def workload_of(body: Obj, *conditions_: tuple[str, str, str], flavor: str = "trn2",
                message: str = "") -> Obj:
    """BODY's Workload (the one the operator made for it, as the watch keeps it) as Kueue
    left it: CONDITIONS (type, status, reason) and, when QuotaReserved is True, an
    admission to flavor FLAVOR."""
    counts = kueue.job_pod_counts(TrainingJobSpec.model_validate(body["spec"]))
    found: Obj = {
        "apiVersion": kueue.API_VERSION,
        "metadata": {"name": kueue.workload_name(body), "namespace": "ns",
                     "resourceVersion": "7", "generation": 1,
                     "ownerReferences": [{"kind": "TrainingJob", "name": body["metadata"][
                         "name"], "uid": body["metadata"]["uid"], "controller": True}]},
        "spec": {"podSets": [{"name": k, "count": v} for k, v in counts.items()]},
        "status": {"conditions": [{"type": t, "status": s, "reason": r, "message": message,
                                   "lastTransitionTime": millis(NOW - 5)}
                                  for t, s, r in conditions_]}}
    if ("QuotaReserved", "True") in [(t, s) for t, s, _ in conditions_]:
        found["status"]["admission"] = {"clusterQueue": "cq", "podSetAssignments": [
            {"name": kueue.WORKERS, "flavors": {"aws.amazon.com/neuron": flavor}}]}
    return found


ADMITTED = (("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"))
EVICTED = (*ADMITTED, ("Evicted", "True", "Preempted"))


def decided(jobs: list[Obj], pods: Sequence[Obj] = (), workloads: Sequence[Obj] = (),
            flavors: dict[str, dict[str, str]] | None = None, served: bool = True,
            **fields: Any) -> dict[str, JobDecision]:
    snapshot = world(nodes(), jobs, pods,
                     workloads={("ns", w["metadata"]["name"]): w for w in workloads},
                     flavors={"trn2": TRN2_LABELS} if flavors is None else flavors,
                     kueue=served, **fields)
    with trial(snapshot):
        found = decide_jobs(snapshot, [])
    for decision in found:
        merged = {**decision.status, **decision.desired}
        TrainingJobStatus.model_validate({k: v for k, v in merged.items() if v is not None})
    return {d.job["metadata"]["name"]: d for d in found}


@dataclass(frozen=True)
class Case:
    name: str
    workload: tuple[tuple[str, str, str], ...] | None  # None: no Workload yet
    placed: bool  # the job is placed this pass
    reason: str  # its Admitted condition's reason
    creates_workload: bool = False
    served: bool = True
    flavors: dict[str, dict[str, str]] | None = None


CASES = [
    Case("a new queued job creates its Workload and waits", None, False, "Queued",
         creates_workload=True),
    Case("a Workload with no quota yet keeps it waiting",
         (("QuotaReserved", "False", "Pending"),), False, "Queued"),
    Case("quota reserved but admission checks pending: still waiting",
         (("QuotaReserved", "True", "QuotaReserved"),), False, "Queued"),
    Case("admitted: placed", ADMITTED, True, "Admitted"),
    Case("admitted to a flavor not read yet: waits for it", ADMITTED, False, "Admitted",
         flavors={}),
    Case("no Kueue in the cluster: waits and says so", None, False, "KueueUnavailable",
         served=False),
    Case("a finished Workload never runs the job again",
         (*ADMITTED, ("Finished", "True", "Succeeded")), False, "Finished"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_queued_job_runs_only_once_kueue_admits_it(case: Case) -> None:
    body = queued()
    workloads = [] if case.workload is None else [workload_of(body, *case.workload)]
    found = decided([body], workloads=workloads, served=case.served,
                    flavors=case.flavors)["j"]
    assert (found.placement is not None) == case.placed
    assert found.attempt is not None
    if not case.placed:
        assert found.attempt.create == [] and found.reservations == []
    assert conditions(found.desired)["Admitted"][1] == case.reason
    assert (found.quota is not None and found.quota.create is not None) == \
        case.creates_workload
    assert found.desired["workload"] == kueue.workload_name(body)


def test_an_admitted_job_is_placed_on_the_flavors_nodes_and_its_pods_say_so() -> None:
    other = {"pool": "trn2", US: "us-1"}
    body = queued()
    found = decided([body], workloads=[workload_of(body, *ADMITTED, flavor="us1")],
                    flavors={"us1": other})["j"]
    assert found.placement is not None
    assert {r["domain"] for r in ranks_of(found.placement)} == {"us-1"}
    assert found.attempt is not None and found.attempt.create
    for pod in found.attempt.create:
        assert pod["spec"]["nodeSelector"].items() >= other.items()
    assert "on nodes" in conditions_message(found.desired, "Admitted")


def conditions_message(status: Obj, kind: str) -> str:
    return next(c["message"] for c in status["conditions"] if c["type"] == kind)


def running(name: str = "j") -> tuple[Obj, list[Obj]]:
    nodes_ = ["us0-n0", "us0-n1"]
    body = queued(name, status={"phase": "Running", "placement": placed(*nodes_),
                                "startTime": millis(NOW - 600),
                                "goodput": {"since": millis(NOW - 600)}},
                  checkpoint={"dir": "/fsx/ckpt"})
    pods = [worker(body, rank, node_name=node, phase="Running", ready=True)
            for rank, node in enumerate(nodes_)]
    return body, pods


def test_an_eviction_asks_for_a_checkpoint_then_stops_and_requeues_the_job() -> None:
    body, pods = running()
    found = decided([body], pods, [workload_of(body, *EVICTED)])["j"]
    assert conditions(found.desired)["Preempted"] == ("True", "Checkpointing")
    said = conditions_message(found.desired, "Preempted")
    assert said.startswith("evicted by Kueue (evicted from ClusterQueue cq: Preempted")
    assert found.attempt is not None and found.attempt.delete == []
    assert found.quota is not None and found.quota.patch is None  # workers still there
    body = {**body, "status": {**body["status"], **found.desired}}
    later = decided([body], pods, [workload_of(body, *EVICTED)], clock=NOW + 121)["j"]
    assert later.desired["phase"] == "Recovering"
    assert later.attempt is not None and sorted(later.attempt.delete) == sorted(
        p["metadata"]["name"] for p in pods)
    assert later.desired["incidents"][-1]["cause"] == "Preemption"


def test_once_the_evicted_workers_are_gone_the_quota_is_given_back() -> None:
    body = queued(status={"phase": "Recovering", "restarts": 1})
    wl = workload_of(body, *EVICTED, message="Preempted to accommodate a workload")
    found = decided([body], [], [wl])["j"]
    assert found.placement is None
    assert found.quota is not None and found.quota.target is wl
    patch = found.quota.patch
    assert patch is not None and patch["admission"] is None
    after = {c["type"]: (c["status"], c["reason"]) for c in patch["conditions"]}
    assert after["QuotaReserved"] == ("False", "Pending")
    assert after["Admitted"][0] == "False"
    assert after["Requeued"] == ("True", "Preempted")
    assert "queued again" in found.desired["message"]


def test_a_job_that_ends_finishes_its_workload_once() -> None:
    body, _ = running()
    done = [worker(body, rank, node_name=f"us0-n{rank}", phase="Succeeded") for rank in (0, 1)]
    found = decided([body], done, [workload_of(body, *ADMITTED)])["j"]
    assert found.desired["phase"] == "Succeeded"
    assert found.quota is not None and found.quota.patch is not None
    finished = {c["type"]: c for c in found.quota.patch["conditions"]}["Finished"]
    assert (finished["status"], finished["reason"]) == ("True", "Succeeded")
    already = workload_of(body, *ADMITTED, ("Finished", "True", "Succeeded"))
    again = decided([{**body, "status": found.desired}], done, [already])["j"]
    assert again.quota is not None and again.quota.patch is None


def test_a_workload_the_api_server_refused_is_said_on_the_job_and_tried_again_later() -> None:
    body = queued()
    name = kueue.workload_name(body)
    refused = {("TrainingJob", "ns", "j"): (name, Refusal(3, "admission webhook denied it",
                                                          NOW - 2))}
    found = decided([body], workload_refusals=refused)["j"]
    assert conditions(found.desired)["Admitted"] == ("False", "WorkloadRefused")
    assert "admission webhook denied it" in conditions_message(found.desired, "Admitted")
    assert found.desired["phase"] == "Pending" and found.placement is None
    assert found.quota is not None and found.quota.create is None  # backing off: 2**3 s
    assert found.wake_at == NOW + 6
    later = decided([body], workload_refusals=refused, clock=NOW + 7)["j"]
    assert later.quota is not None and later.quota.create is not None
    # the same name recreated is a new object with a Workload of its own: not refused
    again = queued()
    again["metadata"]["uid"] = "uid-new"
    fresh = decided([again], workload_refusals=refused)["j"]
    assert conditions(fresh.desired)["Admitted"][1] == "Queued"
    assert fresh.quota is not None and fresh.quota.create is not None


def test_a_refused_workload_of_a_delegated_job_is_said_on_the_manager() -> None:
    body = delegated()
    refused = {("TrainingJob", "ns", "m"): (kueue.workload_name(body),
                                            Refusal(1, "quota webhook says no", NOW))}
    found = decided([], delegated=[body], workload_refusals=refused)["m"]
    assert conditions(found.desired)["Admitted"] == ("False", "WorkloadRefused")
    assert "quota webhook says no" in found.desired["message"]
    assert found.quota is not None and found.quota.create is None


def test_a_job_without_a_queue_label_is_untouched() -> None:
    plain = job("plain")
    found = decided([plain], served=True)["plain"]
    assert found.quota is None and found.placement is not None
    assert "Admitted" not in conditions(found.desired)


def test_a_job_multikueue_sent_here_waits_for_the_workload_it_names() -> None:
    body = job("remote")
    body["metadata"]["labels"] = {kueue.PREBUILT_LABEL: "trainingjob-remote-abcde"}
    alone = decided([body])["remote"]
    assert alone.placement is None
    assert conditions(alone.desired)["Admitted"] == ("False", "WorkloadMissing")
    assert alone.quota is not None and alone.quota.create is None  # MultiKueue makes it
    admitted = workload_of(body, *ADMITTED)
    assert admitted["metadata"]["name"] == "trainingjob-remote-abcde"
    assert decided([body], workloads=[admitted])["remote"].placement is not None


def test_the_cluster_name_is_written_into_every_status() -> None:
    found = decided([job("plain")], cluster_name="region-a")["plain"]
    assert found.desired["cluster"] == "region-a"


def delegated(name: str = "m", labels: Obj | None = None) -> Obj:
    body = job(name, managedBy=kueue.MULTIKUEUE)
    body["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team-a"} if labels is None else labels
    return body


def test_on_the_manager_a_delegated_job_only_gets_its_workload() -> None:
    body = delegated()
    found = decided([], delegated=[body])["m"]
    assert found.attempt is None and found.desired == {}
    assert found.quota is not None and found.quota.create is not None
    wl = found.quota.create
    assert wl["spec"]["queueName"] == "team-a"
    assert wl["metadata"]["ownerReferences"][0]["uid"] == "uid-m"
    # waiting for MultiKueue: said until a worker has it; then the status is MultiKueue's
    pending = decided([], delegated=[body], workloads=[workload_of(
        body, ("QuotaReserved", "False", "Pending"))])["m"]
    assert pending.desired["phase"] == "Pending"
    assert "waiting for MultiKueue" in pending.desired["message"]
    sent = workload_of(body, *ADMITTED)
    sent["status"]["clusterName"] = "region-a"
    assert decided([], delegated=[body], workloads=[sent])["m"].desired == {}


def test_a_delegated_job_without_a_queue_says_nothing_will_run_it() -> None:
    found = decided([], delegated=[delegated(labels={})])["m"]
    assert conditions(found.desired)["Admitted"] == ("False", "NoQueue")
    assert found.quota is None


def test_the_workload_counts_every_pod_set_at_the_priority_it_is_given() -> None:
    body = queued(priority=7, podSets=[{"name": "launcher", "replicas": 1,
                                        "acceleratorsPerPod": 0}])
    spec = TrainingJobSpec.model_validate(body["spec"])
    ref = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
    wl = kueue.workload(body, spec, Fabric("aws.amazon.com/neuron", 16, 16), 1000, ref)
    assert wl["spec"]["priority"] == 1000 and wl["spec"]["queueName"] == "team-a"
    assert wl["spec"]["priorityClassRef"] == ref
    sets = {s["name"]: s for s in wl["spec"]["podSets"]}
    assert sets["workers"]["count"] == 2 and sets["launcher"]["count"] == 1
    requests = sets["workers"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests["aws.amazon.com/neuron"] == "16"
    assert requests["vpc.amazonaws.com/efa"] == "16"
    assert wl["metadata"]["labels"][kueue.JOB_UID_LABEL] == "uid-j"


HIGH_CLASS = PriorityClass("high", 1000, WORKLOAD_PRIORITY_CLASS)


@pytest.mark.parametrize(("spec", "classes", "value", "ref"), [
    # the number a tenant types never reaches Kueue: it orders only its own namespace
    ({"priority": 1_000_000}, Classes(), 0, None),
    ({"priorityClassName": "high"}, Classes(workload={"high": HIGH_CLASS}), 1000,
     {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}),
    ({"priorityClassName": "high"},
     Classes(pod={"high": PriorityClass("high", 50, PRIORITY_CLASS)}), 50,
     {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"}),
])
def test_the_workload_takes_its_priority_from_the_admins_class(
        spec: Obj, classes: Classes, value: int, ref: Obj | None) -> None:
    found = decided([queued(**spec)], classes=classes)["j"]
    assert found.quota is not None and found.quota.create is not None
    created = found.quota.create["spec"]
    assert created["priority"] == value
    assert created.get("priorityClassRef") == ref


# ---- a Workload is the job's only when it owns it (TENANCY.md rule 3) ------------------

def borrowing(body: Obj, lender: Obj) -> Obj:
    """BODY pointing at LENDER's Workload with the label MultiKueue sets on workers."""
    body["metadata"]["labels"] = {kueue.PREBUILT_LABEL: kueue.workload_name(lender)}
    return body


def test_a_job_cannot_run_under_another_jobs_admitted_workload() -> None:
    small = queued("small", workers=1)
    big = borrowing(job("big", workers=8), small)
    found = decided([big], workloads=[workload_of(small, *ADMITTED)])["big"]
    assert found.placement is None
    assert found.attempt is not None and found.attempt.create == []
    reason = conditions(found.desired)["Admitted"]
    assert reason == ("False", "WorkloadNotOwned")
    assert "belongs to TrainingJob small (uid uid-small)" in found.desired["message"]


def test_a_job_that_ends_never_finishes_a_workload_it_does_not_own() -> None:
    small = queued("small", workers=1)
    body, _ = running()
    body = borrowing(body, small)
    done = [worker(body, rank, node_name=f"us0-n{rank}", phase="Succeeded") for rank in (0, 1)]
    found = decided([body], done, [workload_of(small, *ADMITTED)])["j"]
    assert found.desired["phase"] == "Succeeded"
    assert found.quota is not None and found.quota.patch is None and found.quota.foreign


@pytest.mark.parametrize(("job_origin", "wl_origin", "owned"), [
    ("manager-1", "manager-1", True),   # MultiKueue's copy of the manager's Workload
    (None, "manager-1", False),          # the job was not sent here by MultiKueue
    ("manager-1", None, False),          # a Workload MultiKueue did not make
    ("manager-1", "manager-2", False),
])
def test_an_unowned_workload_is_honoured_only_as_multikueues_copy(
        job_origin: str | None, wl_origin: str | None, owned: bool) -> None:
    body = job("j")
    body["metadata"]["labels"] = {kueue.PREBUILT_LABEL: "remote-wl",
                                  **({kueue.ORIGIN_LABEL: job_origin} if job_origin else {})}
    wl = workload_of(body, *ADMITTED)
    wl["metadata"].update(name="remote-wl", ownerReferences=[],
                          labels={kueue.ORIGIN_LABEL: wl_origin} if wl_origin else {})
    found = decided([body], workloads=[wl])["j"]
    assert (conditions(found.desired)["Admitted"][1] == "Admitted") is owned
    assert (found.placement is not None) is owned


def test_its_own_workload_counting_other_pods_is_made_again_unless_the_workers_run() -> None:
    body = queued(workers=4)
    stale = workload_of(queued(workers=2), *ADMITTED)  # the job had 2 workers then
    found = decided([body], workloads=[stale])["j"]
    assert conditions(found.desired)["Admitted"] == ("False", "WorkloadOutdated")
    assert found.quota is not None and found.quota.remove is stale
    assert found.placement is None
    running_body, pods = running()
    grown = {**running_body, "spec": {**running_body["spec"], "workers": 4}}
    kept = decided([grown], pods, [workload_of(running_body, *ADMITTED)])["j"]
    assert kept.quota is not None and kept.quota.remove is None  # busy: runs on


@pytest.mark.parametrize(("required", "labels", "reason"), [
    (frozenset({"ns"}), {}, "QueueRequired"),
    (frozenset({"*"}), {}, "QueueRequired"),
    (frozenset({"other"}), {}, None),                         # not this namespace: runs
    (frozenset({"ns"}), {kueue.QUEUE_LABEL: "team-a"}, "Queued"),
])
def test_an_admin_can_require_a_queue_in_chosen_namespaces(
        required: frozenset[str], labels: dict[str, str], reason: str | None) -> None:
    body = job("j")
    body["metadata"]["labels"] = labels
    found = decided([body], require_queue=required)["j"]
    assert conditions(found.desired).get("Admitted", (None, None))[1] == reason
    assert (found.placement is not None) is (reason is None)
