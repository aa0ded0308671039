"""Replacing failed nodes while keeping the topology; choosing replicas to scale down."""

from __future__ import annotations

import pytest

from goodput_operator import names
from goodput_operator.topology.model import Fleet
from goodput_operator.topology.placement import Placement, Request, commit, place
from goodput_operator.topology.replacement import (
    Elastic,
    ReplicaGroup,
    choose_scale_down,
    grow,
    replace,
)
from tests.unit.fleets import node, trn2

pytestmark = pytest.mark.unit


def running(fleet: Fleet, request: Request, owner: str = "job") -> Placement:
    placed = place(fleet, request)
    assert placed.ok, placed.reason
    commit(fleet, placed, request, owner)
    return placed


def fail(fleet: Fleet, *names: str) -> None:
    for name in names:
        domain = fleet.nodes[name].domain
        fleet.upsert_node(node(name, domain, fleet.domains[domain].path[1], ready=False))


def test_the_spare_of_the_same_ultraserver_takes_the_failed_rank() -> None:
    fleet = trn2(2, spares=1)
    placed = running(fleet, Request(3, 16))          # us0-n0..n2, spare us0-n3
    fail(fleet, "us0-n1")
    result = replace(fleet, placed, ["us0-n1"], Request(3, 16), "job")
    assert result.action == "replace"
    assert result.moved == {1: "us0-n3"}
    assert [r.node for r in result.ranks] == ["us0-n0", "us0-n3", "us0-n2"]
    assert "rank 1 -> us0-n3" in result.reason


def test_a_lost_rank_never_lands_on_a_node_another_rank_of_its_gang_keeps() -> None:
    """A peer's pod that crashed when the node failed no longer holds its node in the
    fleet, but its rank stays there: the lost rank goes elsewhere (e2e, real nodes)."""
    fleet = trn2(2)
    placed = running(fleet, Request(4, 16, policy="preferred"))  # us0-n0..n3
    fleet.release("job#1")                            # rank 1's worker exited on its own
    fail(fleet, "us0-n2")
    result = replace(fleet, placed, ["us0-n2"], Request(4, 16, policy="preferred"), "job")
    assert result.action == "replace" and result.moved == {2: "us1-n2"}  # nearest slot


def test_a_spare_ultraserver_keeps_whole_domain_gangs_whole_and_takes_them_on_a_failure(
        ) -> None:
    """spares.perGroup = nodesPerDomain: the last UltraServer is held back whole; a 64-chip
    gang takes a whole UltraServer, and when one of its nodes fails it moves there."""
    fleet = trn2(3, group_spares=4)
    assert sorted(n.name for n in fleet.nodes.values() if n.spare) == [
        "us2-n0", "us2-n1", "us2-n2", "us2-n3"]
    whole = Request(4, 16)                            # unit domain, required
    placed = running(fleet, whole)
    assert {r.domain for r in placed.ranks} == {"us-0"}
    running(fleet, whole, "other")                    # us-1; us-2 stays the spare
    assert not place(fleet, whole).ok
    fail(fleet, "us0-n2")
    result = replace(fleet, placed, ["us0-n2"], whole, "job")
    assert result.action == "move" and {r.domain for r in result.ranks} == {"us-2"}


def test_two_failures_with_one_spare_move_the_gang_to_a_healthy_domain() -> None:
    fleet = trn2(2, spares=1)
    placed = running(fleet, Request(3, 16))
    fail(fleet, "us0-n0", "us0-n1")
    result = replace(fleet, placed, ["us0-n0", "us0-n1"], Request(3, 16), "job")
    assert result.action == "move"
    assert {r.domain for r in result.ranks} == {"us-1"}


def test_preferred_jobs_may_take_a_spare_from_a_neighbouring_domain() -> None:
    fleet = trn2(2, spares=1)
    request = Request(3, 16, policy="preferred")
    placed = running(fleet, request)
    running(fleet, Request(3, 16), "other")           # us-1's usable nodes are taken
    fail(fleet, "us0-n0", "us0-n1")
    result = replace(fleet, placed, ["us0-n0", "us0-n1"], request, "job")
    assert result.action == "replace"
    assert result.moved == {0: "us0-n3", 1: "us1-n3"}


@pytest.mark.parametrize(("policy", "action", "where"), [
    ("any", "replace", {"us0-n3"}),        # the free node beside it takes the rank
    ("spare", "move", {"us-0"}),           # no spare: the gang is placed again, whole
])
def test_node_replacement_any_takes_a_free_node_spare_only_a_spare(
        policy: str, action: str, where: set[str]) -> None:
    fleet = trn2(2)                                   # no spares at all
    placed = running(fleet, Request(3, 16))           # us0-n0..n2; us0-n3 free
    fail(fleet, "us0-n1")
    result = replace(fleet, placed, ["us0-n1"], Request(3, 16), "job",
                     spares_only=policy == "spare")
    assert result.action == action
    assert (set(result.moved.values()) if action == "replace"
            else {r.domain for r in result.ranks}) == where


def test_with_no_room_the_job_waits_and_says_why() -> None:
    fleet = trn2(1, spares=1)
    placed = running(fleet, Request(3, 16))
    fail(fleet, "us0-n0", "us0-n1")
    result = replace(fleet, placed, ["us0-n0", "us0-n1"], Request(3, 16), "job")
    assert result.action == "wait"
    assert "cannot replace 2 failed rank(s): needs 1 whole UltraServer" in result.reason


def test_elastic_jobs_shrink_in_steps_instead_of_waiting() -> None:
    fleet = trn2(1)
    placed = running(fleet, Request(4, 16))
    fail(fleet, "us0-n2", "us0-n3")
    result = replace(fleet, placed, ["us0-n2", "us0-n3"], Request(4, 16), "job",
                     elastic=Elastic(min_workers=2, step=2))
    assert result.action == "shrink"
    assert [r.node for r in result.ranks] == ["us0-n0", "us0-n1"]


@pytest.mark.parametrize(("healthy", "grown"), [
    (4, ["us0-n0", "us0-n1", "us0-n2", "us0-n3"]),   # all back: the full size
    (3, None),                                          # 3 is not 2 + a step of 2
])
def test_a_shrunk_elastic_gang_grows_back_in_steps_when_a_larger_gang_fits(
        healthy: int, grown: list[str] | None) -> None:
    """A gang of 4 (min 2, step 2) shrunk to 2 in one UltraServer: it grows back to 4 on
    its own nodes and the healed ones, never to a size between steps."""
    fleet = trn2(1)
    running(fleet, Request(2, 16))
    for name in ("us0-n2", "us0-n3")[:4 - healthy]:
        fail(fleet, name)
    result = grow(fleet, 2, Request(4, 16), "job", Elastic(min_workers=2, step=2))
    assert (sorted(r.node for r in result.ranks) if result else None) == grown
    if result is not None:
        assert result.action == "grow" and "growing from 2 to 4 workers" in result.reason


def test_growing_back_leaves_the_spares_to_recovery() -> None:
    """The only free node is the UltraServer's spare: no grow (a gang that grew onto it
    would shrink at the next failure, and the spare would not be there for it)."""
    fleet = trn2(1, spares=1)
    running(fleet, Request(2, 16))
    fail(fleet, "us0-n2")
    assert grow(fleet, 2, Request(4, 16), "job", Elastic(min_workers=2, step=1)) is None
    assert grow(fleet, 2, Request(3, 16), "job", Elastic(min_workers=2, step=1)) is None


def test_a_waiting_job_resumes_on_the_node_once_it_heals() -> None:
    fleet = trn2(1)
    placed = running(fleet, Request(4, 16))
    fail(fleet, "us0-n3")
    fleet.release("job#3")                    # the failed worker's pod is gone
    assert replace(fleet, placed, ["us0-n3"], Request(4, 16), "job").action == "wait"
    fleet.upsert_node(node("us0-n3", "us-0", "b0"))
    result = replace(fleet, placed, ["us0-n3"], Request(4, 16), "job")
    assert result.action == "replace" and result.moved == {3: "us0-n3"}


@pytest.mark.parametrize(
    ("groups", "remove", "expected"),
    [
        ([("g0", "a"), ("g1", "a"), ("g2", "b")], 1, ["g2"]),       # frees domain b
        ([("g0", "a"), ("g1", "b"), ("g2", "a"), ("g3", "b")], 2, ["g2", "g0"]),
        ([("g0", "a"), ("g1", "b"), ("g2", "b"), ("g3", "c"), ("g4", "c"), ("g5", "c")],
         3, ["g0", "g2", "g1"]),
        ([("g0", "a")], 0, []),
    ],
)
def test_scale_down_frees_whole_domains(groups: list[tuple[str, str]], remove: int,
                                        expected: list[str]) -> None:
    chosen = choose_scale_down([ReplicaGroup(g, d) for g, d in groups], remove)
    assert chosen == expected


def test_a_moving_gang_may_take_the_spare_of_the_domain_it_moves_to() -> None:
    fleet = trn2(2, spares=1)
    placed = running(fleet, Request(3, 16))          # us0-n0..n2, spare us0-n3
    fail(fleet, "us0-n0", "us0-n1", "us1-n1")
    # us-1 has 3 healthy nodes, one of them held as its spare: a new 3-worker job waits,
    # the recovering gang moves there, spare included
    assert place(fleet, Request(3, 16)).ok is False
    result = replace(fleet, placed, ["us0-n0", "us0-n1"], Request(3, 16), "job")
    assert result.action == "move"
    assert [r.node for r in result.ranks] == ["us1-n0", "us1-n2", "us1-n3"]
    assert fleet.nodes["us1-n3"].spare                # held again once the move is found


def test_spares_released_restores_the_spares_afterwards() -> None:
    fleet = trn2(1, spares=1)
    with fleet.spares_released():
        assert not any(n.spare for n in fleet.nodes.values())
    assert [n.name for n in fleet.nodes.values() if n.spare] == ["us0-n3"]


def test_repeat_offenders_are_held_as_spares_and_replace_last() -> None:
    fleet = trn2(1, spares=1)
    lemon = node("us0-n1", "us-0", fleet.domains["us-0"].path[1])
    lemon["metadata"]["annotations"] = {names.LEMON_ANNOTATION: "3"}
    fleet.upsert_node(lemon)
    assert [n.name for n in fleet.nodes.values() if n.spare] == ["us0-n1"]
    placed = running(fleet, Request(3, 16))
    assert "us0-n1" not in placed.hosts


@pytest.mark.parametrize(("free_in_home", "action"), [(True, "replace"), (False, "move")])
def test_a_balanced_gang_replaces_a_rank_only_inside_its_domain(free_in_home: bool,
                                                                 action: str) -> None:
    """12 workers split 6+6 over two UltraServers of 8 (a third is free). A failed rank
    takes a free node of its own UltraServer; when there is none it does not go to
    another (that would make it 5+7): the gang is placed again, evenly."""
    fleet = trn2(3, per_block=3, nodes_per_domain=8)
    request = Request(12, 16, balance=True)
    placed = running(fleet, request)
    home = placed.ranks[0].domain
    if not free_in_home:
        idle = [n.name for n in fleet.domains[home].nodes if not n.pods]
        for i, name in enumerate(idle):
            fleet.bind(f"other#{i}", name, 16, "tj/ns/other")
    fail(fleet, placed.ranks[0].node)
    result = replace(fleet, placed, [placed.ranks[0].node], request, "job")
    assert result.action == action, result.reason
    counts: dict[str, int] = {}
    for rank in result.ranks:
        counts[rank.domain] = counts.get(rank.domain, 0) + 1
    assert sorted(counts.values()) == [6, 6]
    if action == "replace":
        assert result.moved is not None
        assert fleet.nodes[result.moved[0]].domain == home
