"""Bookings only for what is real (TENANCY.md rule 4): a foreign pod that can never bind
books no accelerators, a pinned one only for a bounded time, and the operator's own
annotations mean something only on its own pods."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.controllers.state import State
from goodput_operator.decide.group import decide_group
from goodput_operator.times import millis
from goodput_operator.topology.bookings import PINNED_UNBOUND_SECONDS, Booking, booking
from tests.unit.fleets import node
from tests.unit.world import NEURON, NOW, group_spec

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
HOST = "kubernetes.io/hostname"
CREATED = NOW - 10


def pod(name: str = "p", *, bound: str | None = None, pinned: str | None = None,
        gates: bool = False, annotated: str | None = None, created: float = CREATED,
        namespace: str = "team-a", owner: Obj | None = None) -> Obj:
    spec: Obj = {"containers": [{"name": "c", "resources": {"limits": {NEURON: "16"}}}]}
    if bound:
        spec["nodeName"] = bound
    if pinned:
        spec["nodeSelector"] = {HOST: pinned}
    if gates:
        spec["schedulingGates"] = [{"name": "example.com/never"}]
    meta: Obj = {"name": name, "namespace": namespace, "resourceVersion": "1",
                 "creationTimestamp": millis(created)}
    if annotated:
        meta["annotations"] = {names.NODE_ANNOTATION: annotated}
    if owner:
        meta["ownerReferences"] = [owner]
    return {"metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


@pytest.mark.parametrize(("body", "own", "expected"), [
    (pod(bound="n1"), False, Booking("n1")),                       # bound: always
    (pod(pinned="n1"), False, Booking("n1", until=CREATED + PINNED_UNBOUND_SECONDS)),
    (pod(pinned="n1", gates=True), False,
     Booking(None, "pinned to n1 but held by scheduling gates of its own", "n1")),
    (pod(pinned="n1", created=NOW - PINNED_UNBOUND_SECONDS - 1), False,
     Booking(None, "pinned to n1 and unbound for over 300 s", "n1")),
    (pod(annotated="n1"), False, Booking(None)),                   # our word, not theirs
    (pod(annotated="n1", gates=True), True, Booking("n1")),        # ours: gated till placed
    (pod(gates=True), False, Booking(None)),                       # pinned nowhere
])
def test_where_an_unbound_pod_books(body: Obj, own: bool, expected: Booking) -> None:
    assert booking(body, own, NOW) == expected


def one_group_state() -> State:
    """A group of two UltraServers of 4 x 16 chips, us0-n0 .. us1-n3."""
    state = State()
    for d in range(2):
        for n in range(4):
            body = node(f"us{d}-n{n}", f"us{d}")
            body["metadata"]["labels"]["pool"] = "trn2"
            state.upsert_node(body)
    state.upsert_group({"metadata": {"name": "trn2", "generation": 1,
                                     "creationTimestamp": millis(NOW - 100)},
                        "spec": group_spec(nodeSelector={"pool": "trn2"}).model_dump(
                            by_alias=True)})
    return state


NODES = [f"us{d}-n{n}" for d in range(2) for n in range(4)]


def free(state: State) -> int:
    return sum(n.capacity - n.used for n in state.fleets["trn2"].nodes.values())


def test_eight_gated_squatters_leave_every_accelerator_free_and_are_named() -> None:
    state = one_group_state()
    for i, name in enumerate(NODES):
        state.upsert_pod(pod(f"squat-{i}", pinned=name, gates=True))
    assert free(state) == 128
    snapshot = state.snapshot(NOW, with_members=True)
    status = decide_group(snapshot, "trn2").desired
    assert len(status["ignoredPods"]) == 8 and status["ignoredPodsOmitted"] == 0
    assert status["ignoredPods"][0] == {
        "pod": "team-a/squat-0", "node": "us0-n0",
        "reason": "pinned to us0-n0 but held by scheduling gates of its own"}


def test_a_pinned_foreign_pod_that_never_binds_stops_booking() -> None:
    state = one_group_state()
    state.upsert_pod(pod("pinned", pinned="us0-n0", created=NOW))
    assert free(state) == 112                       # it may yet bind: it books
    state.snapshot(NOW + PINNED_UNBOUND_SECONDS - 1)
    assert free(state) == 112
    state.snapshot(NOW + PINNED_UNBOUND_SECONDS)      # the pass after its time
    assert free(state) == 128
    assert state.ignored_pods["team-a/pinned"][0] == "us0-n0"
    state.upsert_pod(pod("pinned", bound="us0-n0", created=NOW))  # it bound after all
    assert free(state) == 112 and "team-a/pinned" not in state.ignored_pods


def test_the_node_annotation_books_only_on_the_operators_own_pods() -> None:
    state = one_group_state()
    job = {"apiVersion": "goodput.dev/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": "j", "namespace": "team-a", "uid": "uid-j",
                        "resourceVersion": "1"},
           "spec": {"ultraServerGroup": "trn2", "workers": 1}}
    ref = {"kind": "TrainingJob", "name": "j", "uid": "uid-j", "controller": True}
    forged = {**ref, "uid": "uid-other"}
    worker = pod("j-r0-0", annotated="us0-n1", gates=True, owner=ref)
    worker["metadata"]["labels"] = {names.JOB_LABEL: "j"}
    state.upsert_pod(worker)                         # seen before its job: not ours yet
    state.upsert_pod(pod("liar", annotated="us0-n2", gates=True, owner=forged))
    assert free(state) == 128
    state.upsert_job(job)                            # now proven ours by UID
    assert state.fleets["trn2"].nodes["us0-n1"].used == 16
    assert state.fleets["trn2"].nodes["us0-n2"].used == 0


def test_a_templates_own_claim_counts_and_a_forged_annotation_hides_nothing() -> None:
    """On a group that claims by DRA only the claim the operator gave its own worker is
    counted by the pod; a template's own claim on the same pod, and a foreign pod's claim
    (whatever it annotates), count on the node."""
    from goodput_operator.resources.claims import CLAIM
    from goodput_operator.topology.model import POD_CLAIM_NAME, claim_use
    from tests.unit.test_capacity import claim

    state = State()
    body = node("us0-n0", "us0")
    body["metadata"]["labels"]["pool"] = "trn2"
    state.upsert_node(body)
    spec = group_spec(nodeSelector={"pool": "trn2"}, accelerator={
        "resource": NEURON, "perNode": 16, "requestStyle": "ResourceClaim"})
    state.upsert_group({"metadata": {"name": "trn2", "creationTimestamp": millis(NOW - 100)},
                        "spec": spec.model_dump(by_alias=True)})
    state.upsert_job({"metadata": {"name": "j", "namespace": "ml", "uid": "uid-j",
                                   "resourceVersion": "1"}, "spec": {}})
    ref = {"kind": "TrainingJob", "name": "j", "uid": "uid-j", "controller": True}
    worker = {"metadata": {"name": "w0", "namespace": "ml", "resourceVersion": "5",
                           "ownerReferences": [ref], "labels": {names.JOB_LABEL: "j"},
                           "annotations": {names.ACCELERATORS_ANNOTATION: "4"}},
              "spec": {"nodeName": "us0-n0", "containers": [{"name": "c"}]},
              "status": {"phase": "Running"}}
    state.upsert_pod(worker)
    used = lambda: state.fleets["trn2"].nodes["us0-n0"].used  # noqa: E731

    def made(name: str, pod: str, count: int, pod_claim: str) -> None:
        body = claim("ml", name, "us0-n0", count, pod)
        body["metadata"]["annotations"] = {POD_CLAIM_NAME: pod_claim}
        state.upsert_claim(f"ml/{name}", claim_use(body))

    assert used() == 4                                   # the worker, by its annotation
    made("w0-accelerators", "w0", 4, CLAIM)
    assert used() == 4                                   # the operator's claim: once
    made("w0-extra", "w0", 8, "extra")
    assert used() == 12                                  # the template's own: counted
    forger = {"metadata": {"name": "f", "namespace": "ml", "resourceVersion": "1",
                           "annotations": {names.ACCELERATORS_ANNOTATION: "1"}},
              "spec": {"nodeName": "us0-n0", "containers": [{"name": "c"}]},
              "status": {"phase": "Running"}}
    state.upsert_pod(forger)
    made("f-accelerators", "f", 3, CLAIM)
    assert used() == 15                                  # its claim, not its word
