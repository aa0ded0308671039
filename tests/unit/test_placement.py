"""Placement policies, one behaviour per test (fleets from tests/unit/fleets.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from goodput_operator.topology.model import Fleet
from goodput_operator.topology.placement import (
    Request,
    commit,
    domain_capacity,
    place,
    slice_start,
)
from tests.unit.fleets import node, nvl72, trn2

pytestmark = pytest.mark.unit


def run(fleet: Fleet, request: Request, owner: str) -> list[str]:
    placed = place(fleet, request)
    assert placed.ok, placed.reason
    commit(fleet, placed, request, owner)
    return placed.hosts


def test_eight_whole_nodes_take_two_whole_ultraservers() -> None:
    placed = place(trn2(4), Request(8, 16))
    assert placed.ok and placed.domains == ("us-0", "us-1")
    assert placed.hosts == [f"us{d}-n{s}" for d in (0, 1) for s in range(4)]
    assert placed.extra_domains == 0
    assert "2 UltraServers (the minimum)" in placed.reason


def test_two_workers_take_an_aligned_half() -> None:
    placed = place(trn2(4), Request(2, 16))
    assert [r.slot for r in placed.ranks] == [0, 1]
    assert len(placed.domains) == 1


def test_small_jobs_fill_a_used_ultraserver_before_breaking_a_whole_one() -> None:
    fleet = trn2(4)
    assert run(fleet, Request(2, 16), "a") == ["us0-n0", "us0-n1"]
    assert run(fleet, Request(1, 16), "b") == ["us0-n2"]
    assert run(fleet, Request(1, 16), "c") == ["us0-n3"]
    assert run(fleet, Request(2, 16), "d") == ["us1-n0", "us1-n1"]


def test_aligned_slices_keep_the_free_half_whole() -> None:
    fleet = trn2(1)
    run(fleet, Request(1, 16), "a")           # slot 0
    assert run(fleet, Request(2, 16), "b") == ["us0-n2", "us0-n3"]  # aligned pair, not 1-2


def test_remainder_goes_to_the_tightest_partly_used_domain() -> None:
    fleet = trn2(4)
    run(fleet, Request(2, 16), "a")            # us-0 half used
    placed = place(fleet, Request(6, 16))      # 4 + 2: us-1 whole, rest into us-0
    assert sorted(placed.domains) == ["us-0", "us-1"]
    assert [r.node for r in placed.ranks if r.domain == "us-0"] == ["us0-n2", "us0-n3"]


def test_a_degraded_domain_is_used_before_a_whole_one_is_broken() -> None:
    fleet = trn2(4)
    fleet.upsert_node(node("us3-n1", "us-3", "b1", ready=False))
    assert place(fleet, Request(3, 16)).domains == ("us-3",)


def test_required_waits_for_whole_domains_and_says_why() -> None:
    fleet = trn2(4)
    for owner in ("a", "b", "c"):
        run(fleet, Request(1, 16), owner)   # all three land in us-0
    fleet.upsert_node(node("us3-n1", "us-3", "b1", ready=False))
    assert run(fleet, Request(3, 16), "tj/ns/big") == ["us3-n0", "us3-n2", "us3-n3"]
    assert run(fleet, Request(2, 16), "d") == ["us1-n0", "us1-n1"]
    placed = place(fleet, Request(8, 16))
    assert not placed.ok
    assert placed.reason.startswith("needs 2 whole UltraServers (4 nodes x 16 "
                                    "aws.amazon.com/neuron) for 8 workers x 16")
    assert "1 free" in placed.reason
    assert "1 degraded (us3-n1 notready)" in placed.reason
    assert "2 partially used by a, b, c and 1 more (room for 3 there)" in placed.reason


def test_preferred_spreads_when_required_would_wait() -> None:
    fleet = trn2(4)
    for d in range(4):                          # one node busy in every UltraServer
        fleet.bind(f"ns/p{d}", f"us{d}-n0", 16, "other")
    assert place(fleet, Request(6, 16)).ok      # 3 + 3: still the minimum of 2
    assert not place(fleet, Request(7, 16)).ok  # would need 3 where 2 could do
    placed = place(fleet, Request(7, 16, policy="preferred"))
    assert placed.ok and len(placed.domains) == 3 and placed.extra_domains == 1


def test_required_block_must_fit_one_network_block() -> None:
    fleet = trn2(4, per_block=2)               # 2 blocks of 2 UltraServers (8 nodes)
    assert not place(fleet, Request(10, 16, unit="block")).ok
    spread = place(fleet, Request(10, 16, unit="block", policy="preferred"))
    assert spread.ok and len(spread.domains) == 3
    inside = place(fleet, Request(6, 16, unit="block"))
    blocks = {fleet.domains[d].path for d in inside.domains}
    assert len(blocks) == 1


def test_two_domains_stay_in_one_block_when_one_can_hold_them() -> None:
    fleet = trn2(4, per_block=2)
    run(fleet, Request(1, 16), "a")            # us-0 (block 0) partly used
    placed = place(fleet, Request(8, 16))      # needs two whole: us-2 + us-3 share block 1
    assert placed.domains == ("us-2", "us-3")


def test_node_unit_stays_compact_and_fills_fragments() -> None:
    fleet = trn2(4)
    run(fleet, Request(3, 16), "a")            # us-0 has one free node
    assert place(fleet, Request(1, 16, unit="node")).hosts == ["us0-n3"]
    assert place(fleet, Request(2, 16, unit="node")).hosts == ["us1-n0", "us1-n1"]


def test_partial_node_workers_share_nodes_in_rank_order() -> None:
    placed = place(trn2(1), Request(4, 8))     # two workers per node
    assert placed.hosts == ["us0-n0", "us0-n0", "us0-n1", "us0-n1"]
    assert [r.rank for r in placed.ranks] == [0, 1, 2, 3]


def test_a_worker_larger_than_a_node_is_refused() -> None:
    placed = place(trn2(1), Request(1, 32))
    assert not placed.ok and "asks 32 aws.amazon.com/neuron; nodes have 16" in placed.reason


def test_spares_are_not_used_for_new_placements() -> None:
    fleet = trn2(2, spares=1)                 # 3 usable nodes per UltraServer
    placed = place(fleet, Request(6, 16))
    assert placed.ok and placed.min_domains == 2
    assert not any(fleet.nodes[h].spare for h in placed.hosts)
    assert not place(fleet, Request(7, 16)).ok


def test_ranks_follow_the_fabric_across_blocks() -> None:
    fleet = trn2(6, per_block=3)
    run(fleet, Request(2, 16), "a")
    placed = place(fleet, Request(16, 16, policy="preferred"))
    orders = [fleet.domains[r.domain].order for r in placed.ranks]
    assert orders == sorted(orders)
    for previous, current in zip(placed.ranks, placed.ranks[1:], strict=False):
        if previous.domain == current.domain:
            assert current.slot == previous.slot + 1


def test_nvl72_takes_the_tightest_contiguous_run() -> None:
    fleet = nvl72(1)
    run(fleet, Request(5, 4), "a")             # slots 0-4
    fleet.upsert_node(node("gb0-n10", "clique.0", "b0", 4, ready=False,
                           label="nvidia.com/gpu.clique"))
    placed = place(fleet, Request(4, 4))       # runs: 5-9 (5 long), 11-17 (7 long)
    assert [r.slot for r in placed.ranks] == [5, 6, 7, 8]


@pytest.mark.parametrize(
    ("free", "needed", "start"),
    [
        ([True] * 4, 2, 0),
        ([False, False, True, True], 2, 2),
        ([True, False, True, True], 1, 0),     # fill the buddy of the used slot
        ([False, True, True, True], 1, 1),
        ([True, False, True, True], 2, 2),
        ([True, True, False, True], 3, -1),    # no aligned 4-block: falls back to runs
        ([True] * 8, 3, 0),
        ([True] * 18, 5, 0),
        ([False] * 18, 1, -1),
        ([True, True, False, True, True, True], 2, 0),  # tightest run of non-power size
    ],
)
def test_slice_start(free: list[bool], needed: int, start: int) -> None:
    assert slice_start(free, needed) == start


def test_room_for_counts_gangs_and_leaves_the_fleet_as_it_was() -> None:
    from goodput_operator.topology.placement import room_for

    fleet = trn2(2)
    before = fleet.snapshot()
    assert room_for(fleet, Request(2, 16), limit=10) == 4      # two halves per UltraServer
    assert room_for(fleet, Request(4, 16), limit=1) == 1
    assert fleet.snapshot() == before


def per_domain(placed_ranks: tuple) -> list[int]:
    counts: dict[str, int] = {}
    for rank in placed_ranks:
        counts[rank.domain] = counts.get(rank.domain, 0) + 1
    return list(counts.values())


def used(fleet: Fleet, *nodes: str) -> Fleet:
    """FLEET with another job holding NODES whole."""
    for i, name in enumerate(nodes):
        fleet.bind(f"other#{i}", name, fleet.nodes[name].free, "tj/ns/other")
    return fleet


@pytest.mark.parametrize(("case", "fleet", "request_", "split"), [
    ("a gang over two domains of 8 splits 6+6, not 8+4",
     lambda: trn2(2, nodes_per_domain=8), Request(12, 16, balance=True), [6, 6]),
    ("an odd gang splits 7+6",
     lambda: trn2(2, nodes_per_domain=8), Request(13, 16, balance=True), [7, 6]),
    ("without balance: the roomiest filled first",
     lambda: trn2(2, nodes_per_domain=8), Request(12, 16), [8, 4]),
    ("a gang that fits one domain stays in it",
     lambda: trn2(2, nodes_per_domain=8), Request(5, 16, balance=True), [5]),
    ("around a fragment: the two domains that hold 6 each, not the fragment",
     lambda: used(trn2(3, per_block=3, nodes_per_domain=8), *[f"us0-n{i}" for i in range(5)]),
     Request(12, 16, balance=True), [6, 6]),
    ("preferred: three domains 4+4+4 when no two hold an even split",
     lambda: used(trn2(3, per_block=3, nodes_per_domain=8), *[f"us0-n{i}" for i in range(3)],
                  *[f"us1-n{i}" for i in range(3)]),
     Request(12, 16, policy="preferred", balance=True), [4, 4, 4]),
])
def test_balanced_placement(case: str, fleet: Callable[[], Fleet], request_: Request,
                            split: list[int]) -> None:
    placed = place(fleet(), request_)
    assert placed.ok, placed.reason
    assert sorted(per_domain(placed.ranks), reverse=True) == split, case


def test_balanced_and_required_waits_when_the_fewest_domains_cannot_split_evenly() -> None:
    """12 workers need 2 domains of 8; one has 5 free, so 2 domains give 8+4 but not 6+6:
    a required gang waits, and says why."""
    fleet = used(trn2(2, nodes_per_domain=8), *[f"us0-n{i}" for i in range(3)])
    assert place(fleet, Request(12, 16)).ok
    placed = place(fleet, Request(12, 16, balance=True))
    assert not placed.ok
    assert placed.reason.startswith("no 2 UltraServers hold an even split (topology.balance)")


DAY = 86_400.0
NOW = 1_800_000_000.0


def with_history(fleet: Fleet, name: str, score: str, days_ago: float | None) -> Fleet:
    """FLEET whose node NAME carries an incident score raised DAYS_AGO (None: a score
    written before scores decayed)."""
    from goodput_operator import names
    from goodput_operator.times import millis

    node_ = fleet.nodes[name]
    body = node(name, node_.domain, fleet.domains[node_.domain].path[1], node_.capacity)
    body["metadata"]["annotations"] = {names.LEMON_ANNOTATION: score, **(
        {names.LEMON_AT_ANNOTATION: millis(NOW - days_ago * DAY)} if days_ago is not None
        else {})}
    fleet.upsert_node(body)
    return fleet


@pytest.mark.parametrize(("case", "domains", "history", "request_", "hosts"), [
    ("a gang takes the UltraServer with the clean history",
     2, [("us0-n2", "1", 1)], Request(4, 16), [f"us1-n{i}" for i in range(4)]),
    ("inside an UltraServer, the aligned half with the clean history",
     1, [("us0-n0", "2", 1)], Request(2, 16), ["us0-n2", "us0-n3"]),
    ("an old incident weighs less than a recent one (half-life 14 days)",
     2, [("us0-n1", "3", 70), ("us1-n1", "1", 2)], Request(4, 16),
     [f"us0-n{i}" for i in range(4)]),
    ("history never outweighs topology: a used UltraServer's fragment first",
     2, [("us0-n3", "5", 0)], Request(1, 16), ["us0-n3"]),
])
def test_at_equal_topology_cost_nodes_with_a_clean_recent_history_come_first(
        case: str, domains: int, history: list[tuple[str, str, float]], request_: Request,
        hosts: list[str]) -> None:
    fleet = trn2(domains, per_block=2)
    if case.startswith("history never"):
        used(fleet, "us0-n0", "us0-n1", "us0-n2")
    for name, score, days in history:
        with_history(fleet, name, score, days)
    fleet.set_clock(NOW)
    placed = place(fleet, request_)
    assert placed.ok and sorted(placed.hosts) == hosts, case


def test_incident_scores_decay_with_the_fleet_s_clock() -> None:
    fleet = with_history(trn2(1), "us0-n0", "4", 0)
    fleet.set_clock(NOW)
    assert fleet.nodes["us0-n0"].lemon == 4 and fleet.domains["us-0"].lemon == 4
    fleet.set_clock(NOW + 28 * DAY)                      # two half-lives
    assert fleet.nodes["us0-n0"].lemon == pytest.approx(1.0)
    assert fleet.domains["us-0"].lemon == pytest.approx(1.0)
    legacy = with_history(trn2(1), "us0-n0", "3", None)  # no time: taken as it is
    legacy.set_clock(NOW + 300 * DAY)
    assert legacy.nodes["us0-n0"].lemon == 3


def domains_of(placed_ranks: tuple, size: int) -> list[set[str]]:
    """The domains of each slice of SIZE consecutive ranks."""
    ranks = list(placed_ranks)
    return [{r.domain for r in ranks[i:i + size]} for i in range(0, len(ranks), size)]


@pytest.mark.parametrize(("case", "fleet", "request_", "split"), [
    ("Trn2: 16 workers in slices of 4 take 4 whole UltraServers of one block",
     lambda: used(trn2(6, per_block=6), "us0-n0"), Request(16, 16, unit="block", slice=4),
     [4, 4, 4, 4]),
    ("a slice never straddles two domains: 4 + 4, not 6 + 2",
     lambda: fragmented(), Request(8, 16, policy="preferred", slice=4), [4, 4]),
    ("NVL72: slices of 16 take 16 of each 18-node rack, not 18 + 14",
     lambda: nvl72(3), Request(32, 4, slice=16), [16, 16]),
    ("several slices share a domain that holds them",
     lambda: trn2(2, nodes_per_domain=8), Request(8, 16, slice=4), [8]),
])
def test_sliced_placement(case: str, fleet: Callable[[], Fleet], request_: Request,
                          split: list[int]) -> None:
    placed = place(fleet(), request_)
    assert placed.ok, placed.reason
    assert sorted(per_domain(placed.ranks), reverse=True) == split, case
    assert all(len(d) == 1 for d in domains_of(placed.ranks, request_.slice)), case


def fragmented() -> Fleet:
    """Three UltraServers of 8 with 6, 6 and 2 nodes free."""
    return used(trn2(3, per_block=3, nodes_per_domain=8),
                *[f"us0-n{i}" for i in range(2)], *[f"us1-n{i}" for i in range(2)],
                *[f"us2-n{i}" for i in range(6)])


def test_unsliced_the_same_gang_fills_the_fragment_and_straddles() -> None:
    placed = place(fragmented(), Request(8, 16, policy="preferred"))
    assert sorted(per_domain(placed.ranks), reverse=True) == [6, 2]
    assert any(len(d) > 1 for d in domains_of(placed.ranks, 4))


def test_a_gang_that_is_not_whole_slices_is_refused_with_the_reason() -> None:
    placed = place(trn2(4), Request(10, 16, slice=4))
    assert not placed.ok
    assert placed.reason == ("10 workers do not make whole slices of 4, each inside one "
                             "UltraServer of 4 workers")
    too_big = place(trn2(4), Request(8, 16, slice=8))
    assert not too_big.ok and "whole slices of 8" in too_big.reason


@pytest.mark.parametrize(("eligible", "capacity"), [
    (None, [4, 4]),
    (frozenset({"us0-n0", "us0-n1", "us0-n2", "us0-n3", "us1-n0", "us1-n1", "us1-n2",
                "us1-n3"}), [4, 4]),                                # every node: as None
    (frozenset({"us0-n0", "us0-n1", "us0-n2", "us0-n3", "us1-n1"}), [4, 1]),  # us1 cut
    (frozenset(), [0, 0]),
])
def test_a_domain_s_capacity_counts_only_the_nodes_a_pod_may_run_on(
        eligible: frozenset[str] | None, capacity: list[int]) -> None:
    fleet = trn2(2)
    domains = fleet.ordered_domains()
    for domain in domains:  # the unconstrained count is cached first
        domain_capacity(domain, 16)
    assert [domain_capacity(d, 16, eligible) for d in domains] == capacity
    only_us0 = frozenset({"us0-n0", "us0-n1", "us0-n2", "us0-n3"})  # another set in turn
    assert [domain_capacity(d, 16, only_us0) for d in domains] == [4, 0]
    assert [domain_capacity(d, 16, eligible) for d in domains] == capacity
    used(fleet, "us1-n1")
    assert domain_capacity(domains[1], 16, eligible) == max(capacity[1] - 1, 0)


def test_within_keeps_a_gang_inside_the_given_domains() -> None:
    """A serving unit's group: only the unit's domains count, used or not."""
    fleet = trn2(4)
    run(fleet, Request(3, 16), "a")                     # us-0 has one node left
    placed = place(fleet, Request(2, 16, within=frozenset({"us-0", "us-3"})))
    assert placed.ok and placed.domains == ("us-3",), placed.reason
    assert not place(fleet, Request(2, 16, within=frozenset({"us-0"}))).ok
    assert not place(fleet, Request(1, 16, within=frozenset({"elsewhere"}))).ok


def larger_nodes(accelerators: int = 32, nodes_per_domain: int = 4) -> Fleet:
    """A group whose spec says 4 x 16 per UltraServer, on two with nodes of ACCELERATORS
    (a newer node type; or more nodes to a domain than the spec says)."""
    from goodput_operator.topology.model import GroupShape
    from tests.unit.fleets import L1, L2, US
    shape = GroupShape(US, 4, 16, network_levels=(L1, L2), domain_noun="UltraServer")
    return Fleet.from_objects(shape, [node(f"us{d}-n{s}", f"us-{d}", "b0", accelerators)
                                      for d in range(2) for s in range(nodes_per_domain)])


@pytest.mark.parametrize(("what", "fleet", "request_", "domains"), [
    ("slices of 8 workers x 16 inside one UltraServer of 4 nodes x 32",
     larger_nodes, Request(16, 16, slice=8), ["us-0", "us-1"]),
    ("a worker of 32 on nodes of 32 (the spec says 16)", larger_nodes, Request(2, 32),
     ["us-0"]),
    ("slices of 6 nodes in UltraServers of 6 nodes (the spec says 4)",
     lambda: larger_nodes(16, 6), Request(12, 16, slice=6), ["us-0", "us-1"]),
])
def test_slices_and_workers_fit_what_the_nodes_really_hold(
        what: str, fleet: Callable[[], Fleet], request_: Request, domains: list[str]) -> None:
    placed = place(fleet(), request_)
    assert placed.ok, (what, placed.reason)
    assert sorted(placed.domains) == domains, what


def test_a_slice_no_domain_holds_is_still_refused_as_such() -> None:
    placed = place(larger_nodes(), Request(16, 16, slice=16))
    assert not placed.ok and "do not make whole slices of 16" in placed.reason
    assert "of 8 workers" in placed.reason


def test_what_nodes_hold_is_counted_again_when_a_node_grows() -> None:
    fleet = larger_nodes(16)
    assert not place(fleet, Request(8, 16, slice=8)).ok
    for d in range(2):
        for s in range(4):
            fleet.upsert_node(node(f"us{d}-n{s}", f"us-{d}", "b0", 32))
    assert place(fleet, Request(8, 16, slice=8)).ok
