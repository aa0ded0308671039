"""Pod sets placed together with their gang: all or none, near the workers."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goodput_operator.topology.model import Fleet
from goodput_operator.topology.placement import Companion, Near, Request, commit, place
from tests.unit.fleets import node, nvl72, trn2

pytestmark = pytest.mark.unit


def used(fleet: Fleet, *nodes: tuple[str, int]) -> Fleet:
    for name, accelerators in nodes:
        fleet.bind(f"other/{name}", name, accelerators, "ns/TrainingJob/other")
    return fleet


LEADER = Companion("leader", 1, 0)


def mixed() -> Fleet:
    """Two UltraServers; us-0's last node is a larger instance (32 chips, not 16)."""
    shape = trn2(1).shape
    bodies = [node(f"us{d}-n{s}", f"us-{d}", "b0", 32 if (d, s) == (0, 3) else 16)
              for d in range(2) for s in range(4)]
    return Fleet.from_objects(shape, bodies)


def with_sets(request: Request, companions: list[Companion]) -> Request:
    return dataclasses.replace(request, companions=tuple(companions))


@pytest.mark.parametrize(("case", "fleet", "request_", "companions", "domains", "nodes"), [
    ("a CPU leader goes on rank 0's node, inside the workers' UltraServer",
     lambda: trn2(4), Request(8, 8), [LEADER], ("us-0",), {"leader": ["us0-n0"]}),
    ("a one-chip leader takes the room the workers leave in their UltraServer",
     lambda: trn2(4), Request(7, 8), [Companion("leader", 1, 1)], ("us-0",),
     {"leader": ["us0-n3"]}),
    ("the tightest UltraServer leaves no room for a one-chip leader: the gang moves to one "
     "that holds both", lambda: used(trn2(2), ("us0-n3", 16)), Request(6, 8),
     [Companion("leader", 1, 1)], ("us-1",), {"leader": ["us1-n3"]}),
    ("launcher and two parameter servers share the workers' NVLink domain",
     lambda: nvl72(2), Request(16, 4),
     [Companion("launcher", 1, 0), Companion("ps", 2, 2)], ("clique.0",),
     {"launcher": ["gb0-n0"], "ps": ["gb0-n16", "gb0-n16"]}),
    ("mixed node sizes: the tightest UltraServer leaves no room for the leader; the one "
     "with a double node holds the 4 workers and the leader", mixed, Request(4, 16),
     [Companion("leader", 1, 4)], ("us-0",), {"leader": ["us0-n3"]}),
    ("a leader limited to a node of the other UltraServer: the workers go there too",
     lambda: trn2(2), Request(4, 16),
     [Companion("leader", 1, 0, eligible=frozenset({"us1-n0"}), ineligible="selector")],
     ("us-1",), {"leader": ["us1-n0"]}),
    ("near block: a leader that fits no worker domain goes to a domain of the same block",
     lambda: trn2(4), Request(4, 16), [Companion("leader", 1, 4, near="block")],
     ("us-0",), {"leader": ["us1-n0"]}),
])
def test_pod_sets_land_together_near_their_workers(
        case: str, fleet: object, request_: Request, companions: list[Companion],
        domains: tuple[str, ...], nodes: dict[str, list[str]]) -> None:
    placed = place(fleet(), with_sets(request_, companions))  # type: ignore[operator]
    assert placed.ok, placed.reason
    assert placed.domains == domains, case
    got: dict[str, list[str]] = {}
    for slot in placed.companions:
        got.setdefault(slot.name, []).append(slot.node)
    assert got == nodes, case
    assert len(placed.ranks) == request_.workers
    assert placed.reason.startswith(f"{request_.workers} workers x"), placed.reason


@pytest.mark.parametrize(("case", "fleet", "request_", "companions", "why"), [
    ("a leader needing chips in a gang that fills its UltraServers exactly",
     lambda: trn2(1), Request(4, 16), [Companion("leader", 1, 1)],
     "pod set leader (1 x 1 aws.amazon.com/neuron) finds no room in the workers' "
     "UltraServers (us-0)"),
    ("a leader limited to a node of an UltraServer the workers cannot have",
     lambda: used(trn2(2), *((f"us1-n{s}", 16) for s in range(4))), Request(4, 16),
     [Companion("leader", 1, 0, eligible=frozenset({"us1-n0"}), ineligible="selector")],
     "its pod fits only 1 of the group's 8 nodes (selector)"),
    ("the workers do not fit: nothing is placed",
     lambda: trn2(1), Request(8, 16), [LEADER], "needs 2 whole UltraServers"),
])
def test_pod_sets_that_cannot_land_together_are_not_placed(
        case: str, fleet: object, request_: Request, companions: list[Companion],
        why: str) -> None:
    built: Fleet = fleet()  # type: ignore[operator]
    before = built.snapshot()
    placed = place(built, with_sets(request_, companions))
    assert not placed.ok and not placed.ranks and not placed.companions, case
    assert why in placed.reason, placed.reason
    assert built.snapshot() == before, "a failed solve must leave the fleet as it was"


def test_held_room_never_costs_the_workers_a_domain_under_required() -> None:
    """Two whole UltraServers of workers and a one-chip leader: room for the leader would
    spread the workers over three, which `required` forbids."""
    placed = place(trn2(4), Request(8, 16, companions=(Companion("leader", 1, 1),)))
    assert not placed.ok
    assert "no room in the workers' UltraServers" in placed.reason


@settings(max_examples=120)
@given(st.integers(1, 4), st.integers(1, 16), st.sampled_from([1, 2, 4, 8, 16]),
       st.lists(st.tuples(st.integers(1, 3), st.sampled_from([0, 1, 2, 4, 8])),
                min_size=1, max_size=3),
       st.sampled_from(["domain", "block", "any"]),
       st.lists(st.tuples(st.integers(0, 23), st.integers(1, 16)), max_size=10),
       st.sampled_from(["domain", "node"]), st.sampled_from(["required", "preferred"]),
       st.sets(st.integers(0, 23), max_size=4))
def test_pod_sets_never_overcommit_and_always_hold_their_level(
        per_block: int, workers: int, accelerators: int,
        sets: list[tuple[int, int]], near: Near, taken: list[tuple[int, int]],
        unit: str, policy: str, doubled: set[int]) -> None:
    """On fleets of mixed node sizes (DOUBLED: nodes of 32 chips among 16s), partly used."""
    bodies = [node(f"us{d}-n{s}", f"us-{d}", f"b{d // per_block}",
                   32 if d * 4 + s in doubled else 16) for d in range(6) for s in range(4)]
    fleet = Fleet.from_objects(trn2(1).shape, bodies)
    names = sorted(fleet.nodes)
    for i, (slot, chips) in enumerate(taken):
        held = fleet.nodes[names[slot]]
        if held.free >= chips:
            fleet.bind(f"other/{i}", held.name, chips, "ns/TrainingJob/other")
    request = Request(workers, accelerators, unit, policy)  # type: ignore[arg-type]
    companions = [Companion(f"set{i}", count, chips, near)
                  for i, (count, chips) in enumerate(sets)]
    before = fleet.snapshot()
    placed = place(fleet, with_sets(request, companions))
    assert fleet.snapshot() == before
    if not placed.ok:
        return
    assert len(placed.ranks) == workers
    assert Counter(s.name for s in placed.companions) == {c.name: c.count for c in companions}
    demand: Counter[str] = Counter()
    for rank in placed.ranks:
        demand[rank.node] += accelerators
    chips = {c.name: c.accelerators for c in companions}
    for slot in placed.companions:
        demand[slot.node] += chips[slot.name]
    for name, needed in demand.items():
        assert fleet.nodes[name].usable and needed <= fleet.nodes[name].free, \
            f"{name} overcommitted"
    worker_domains = {r.domain for r in placed.ranks}
    blocks = {fleet.domains[d].path for d in worker_domains}
    for slot in placed.companions:
        if near == "domain":
            assert slot.domain in worker_domains
        elif near == "block":
            assert fleet.domains[slot.domain].path in blocks
    commit(fleet, placed, request, "ns/TrainingJob/job")  # the ranks still commit cleanly


def two_taken_on_us0() -> Fleet:
    """us-0 with two nodes free (the gang's tightest fit), us-1 whole."""
    fleet = trn2(2)
    for s in (0, 1):
        fleet.bind(f"other#{s}", f"us0-n{s}", 16, "other")
    return fleet


@pytest.mark.parametrize(("what", "request_", "leader"), [
    ("a leader larger than a worker", Request(4, 8), Companion("leader", 1, 16)),
    ("balance on", Request(4, 8, balance=True), Companion("leader", 1, 8)),
    ("slices on", Request(4, 8, slice=2), Companion("leader", 1, 8)),
])
def test_a_gang_whose_first_domain_has_no_room_for_its_leader_tries_another(
        what: str, request_: Request, leader: Companion) -> None:
    """The tightest fit, us-0, leaves no node for the leader; us-1 holds both: the gang
    goes there, in its one domain, rather than wait."""
    fleet = two_taken_on_us0()
    placed = place(fleet, dataclasses.replace(request_, companions=(leader,)))
    assert placed.ok, (what, placed.reason)
    assert placed.domains == ("us-1",), what
    assert [c.domain for c in placed.companions] == ["us-1"], what
