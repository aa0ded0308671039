"""Priority comes from the admin's classes (TENANCY.md rule 2): what a tenant types into
spec.priority orders and preempts only its own namespace's jobs."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator.decide import decide_jobs, trial
from goodput_operator.decide.priority import (
    ACROSS_NAMESPACES_ANNOTATION,
    NAMESPACES_ANNOTATION,
    PRIORITY_CLASS,
    WORKLOAD_PRIORITY_CLASS,
    Classes,
    Priority,
    PriorityClass,
    in_order,
    of_job,
    pod_class,
    priority_class,
    resolve,
    with_pod_class,
)
from goodput_operator.times import millis
from tests.unit.world import NOW, conditions, job, placed, worker, world

pytestmark = pytest.mark.unit
Obj = dict[str, Any]

GRANTED = PriorityClass("urgent", 1000, PRIORITY_CLASS, across_namespaces=True)
TEAM_ONLY = PriorityClass("team", 1000, WORKLOAD_PRIORITY_CLASS)
NEVER = PriorityClass("polite", 1000, PRIORITY_CLASS, preempts=False, across_namespaces=True)
CLASSES = Classes(workload={"team": TEAM_ONLY},
                  pod={"urgent": GRANTED, "polite": NEVER,
                       "batch": PriorityClass("batch", 10, PRIORITY_CLASS)})


def a(namespace: str, value: int = 0, local: int = 0,
      klass: PriorityClass | None = None) -> Priority:
    return Priority(namespace, value, local, klass)


@pytest.mark.parametrize(("mine", "theirs", "may"), [
    (a("a", 0, 1_000_000), a("b", 0, 0), False),      # a typed number: not across teams
    (a("a", 0, 10), a("a", 0, 5), True),              # ... but within its own namespace
    (a("a", 1000, 0, TEAM_ONLY), a("b", 10), False),  # a higher class, not granted more
    (a("a", 1000, 0, TEAM_ONLY), a("a", 10), True),   # ... preempts its own namespace
    (a("a", 1000, 0, GRANTED), a("b", 10), True),     # the admin's grant: across
    (a("a", 1000, 0, GRANTED), a("b", 1000), False),  # never an equal class
    (a("a", 1000, 5, GRANTED), a("b", 1000, -5), False),  # whatever the locals say
    (a("a", 1000, 0, NEVER), a("b", 10), False),      # preemptionPolicy: Never
    (a("a", 0, 9), a("a", 10, 0), False),             # the class first, then the local
])
def test_who_may_preempt_whom(mine: Priority, theirs: Priority, may: bool) -> None:
    assert mine.may_preempt(theirs) is may


@pytest.mark.parametrize(("namespace", "name", "value", "reason"), [
    ("a", None, 0, ""),                 # no class and no default: 0
    ("a", "urgent", 1000, ""),
    ("a", "team", 1000, ""),            # a WorkloadPriorityClass of the name first
    ("a", "missing", 0, "PriorityClassNotFound"),
])
def test_a_class_is_found_by_name(namespace: str, name: str | None, value: int,
                                  reason: str) -> None:
    found = resolve(namespace, name, 3, CLASSES)
    assert (found.value, found.reason, found.local) == (value, reason, 3)


def test_the_global_default_class_holds_for_jobs_that_name_none() -> None:
    default = PriorityClass("default", 5, PRIORITY_CLASS, global_default=True)
    classes = Classes(pod={"default": default, "urgent": GRANTED})
    assert resolve("a", None, 0, classes).value == 5
    assert resolve("a", "urgent", 0, classes).value == 1000


def test_a_class_granted_to_some_namespaces_is_refused_elsewhere() -> None:
    body = {"metadata": {"name": "prod", "annotations": {
        NAMESPACES_ANNOTATION: "team-a, team-b", ACROSS_NAMESPACES_ANNOTATION: "true"}},
        "value": 100000, "preemptionPolicy": "PreemptLowerPriority"}
    prod = priority_class(body, PRIORITY_CLASS)
    assert prod is not None and prod.across_namespaces and prod.preempts
    classes = Classes(pod={"prod": prod})
    assert resolve("team-b", "prod", 0, classes).value == 100000
    refused = resolve("team-c", "prod", 0, classes)
    assert (refused.value, refused.reason) == (0, "PriorityClassNotAllowed")
    assert not refused.may_preempt(a("team-c", -5))


@pytest.mark.parametrize("body", [
    {"metadata": {"name": "x"}},                     # no value
    {"metadata": {"name": "x"}, "value": "100"},     # not an integer
    {"metadata": {"name": "x"}, "value": True},
    {"metadata": {}, "value": 1},
])
def test_a_class_without_an_integer_value_is_no_class(body: Obj) -> None:
    assert priority_class(body, PRIORITY_CLASS) is None


def test_a_namespace_reorders_only_the_places_its_jobs_hold() -> None:
    line = [("a", "a1", 0, 0), ("b", "b1", 0, 0), ("a", "a2", 0, 1_000_000),
            ("b", "b2", 1000, 0), ("b", "b3", 0, 5)]
    items = [(ns, name, Priority(ns, value, local)) for ns, name, value, local in line]
    ordered = in_order(items, lambda i: i[2],
                       lambda i: (str(items.index(i)), i[1]))  # arrival as listed
    # b2's class first; a2 takes a1's place (its own namespace's), never b1's
    assert [i[1] for i in ordered] == ["b2", "a2", "b3", "a1", "b1"]


def test_only_a_priority_class_is_written_into_the_pods() -> None:
    pods = [{"spec": {"priority": 7}}, {"spec": {}}]
    with_pod_class(pods, pod_class(a("a", 1000, 0, TEAM_ONLY)))
    assert pods == [{"spec": {"priority": 7}}, {"spec": {}}]
    with_pod_class(pods, pod_class(a("a", 1000, 0, GRANTED)))
    assert pods == [{"spec": {"priorityClassName": "urgent"}}] * 2


def test_a_jobs_priority_is_read_from_its_raw_spec() -> None:
    body = job("j", priority=4, priorityClassName="batch")
    assert of_job(body, CLASSES) == Priority("ns", 10, 4, CLASSES.pod["batch"])
    assert of_job(job("k", priority="9"), CLASSES).local == 0  # the schema refuses it


# ---- through decide_jobs: team A against team B's running job -------------------------

WHOLE = [f"us0-n{s}" for s in range(4)] + [f"us1-n{s}" for s in range(4)]


def team_b_running(**spec: Any) -> tuple[Obj, list[Obj]]:
    body = job("b-train", workers=8, checkpoint={"dir": "/fsx/ckpt"}, **spec, status={
        "phase": "Running", "placement": placed(*WHOLE),
        "startTime": millis(NOW - 600), "goodput": {"since": millis(NOW - 600)}})
    body["metadata"]["namespace"] = "team-b"
    pods = [worker(body, rank, node_name=node, phase="Running", ready=True)
            for rank, node in enumerate(WHOLE)]
    return body, pods


def team_a(**spec: Any) -> Obj:
    body = job("a-grab", workers=8, preemptionPolicy="LowerPriority", **spec)
    body["metadata"]["namespace"] = "team-a"
    return body


@pytest.mark.parametrize(("spec", "preempted", "reason"), [
    ({"priority": 1_000_000}, False, "WaitingForCapacity"),   # the attack of the issue
    ({"priorityClassName": "team"}, False, "WaitingForCapacity"),  # class, no grant
    ({"priorityClassName": "polite"}, False, "WaitingForCapacity"),
    ({"priorityClassName": "missing"}, False, "PriorityClassNotFound"),
    ({"priorityClassName": "urgent"}, True, "Preempting"),   # the admin granted it
])
def test_team_a_preempts_team_b_only_by_an_admin_grant(spec: Obj, preempted: bool,
                                                       reason: str) -> None:
    b, pods = team_b_running()
    snapshot = world(None, [team_a(**spec), b], pods, classes=CLASSES)
    with trial(snapshot):
        found = {d.job["metadata"]["name"]: d for d in decide_jobs(snapshot, [])}
    assert conditions(found["a-grab"].desired)["Placed"] == ("False", reason)
    assert ("preemption" in found["b-train"].desired) is preempted
    if preempted:
        assert "class urgent (1000)" in found["a-grab"].desired["message"]


@pytest.mark.parametrize(("grace", "waits"), [(3600, 300), (60, 60)])
def test_a_victims_grace_holds_another_teams_preemptor_at_most_300_s(grace: int,
                                                                     waits: int) -> None:
    b, pods = team_b_running(preemptionGraceSeconds=grace)
    snapshot = world(None, [team_a(priorityClassName="urgent"), b], pods, classes=CLASSES)
    with trial(snapshot):
        found = {d.job["metadata"]["name"]: d for d in decide_jobs(snapshot, [])}
    assert found["b-train"].desired["preemption"]["deadline"] == millis(NOW + waits)
