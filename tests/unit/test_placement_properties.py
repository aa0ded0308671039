"""Properties of placement and replacement on random fleets and random job sequences."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from goodput_operator.topology.model import Fleet, GroupShape
from goodput_operator.topology.placement import (
    Request,
    _best_in_groups,
    _tightest_domain,
    commit,
    domain_capacity,
    fewest_even,
    is_pristine,
    place,
)
from goodput_operator.topology.replacement import replace
from tests.unit.fleets import L1, L2, US, node

pytestmark = pytest.mark.unit
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def fleets(draw: st.DrawFn) -> Fleet:
    domains = draw(st.integers(1, 8))
    per_domain = draw(st.sampled_from([1, 2, 4, 8, 18]))
    per_node = draw(st.sampled_from([4, 8, 16]))
    per_block = draw(st.integers(1, 4))
    spares = draw(st.integers(0, 1)) if per_domain > 1 else 0
    group_spares = draw(st.sampled_from([0, 1, per_domain]))  # a node, or a spare domain
    down = draw(st.sets(st.integers(0, domains * per_domain - 1), max_size=3))
    # mixed instance sizes, or a wrong perNode: some nodes have half or twice the devices
    sizes = draw(st.lists(st.sampled_from([per_node, per_node, per_node // 2, per_node * 2]),
                          min_size=domains * per_domain, max_size=domains * per_domain))
    shape = GroupShape(US, per_domain, per_node, network_levels=(L1, L2),
                       spares_per_domain=spares, spares_per_group=group_spares)
    nodes = [node(f"d{d}-n{s}", f"d{d}", f"b{d // per_block}", sizes[d * per_domain + s],
                  ready=d * per_domain + s not in down)
             for d in range(domains) for s in range(per_domain)]
    return Fleet.from_objects(shape, nodes)


@st.composite
def requests(draw: st.DrawFn, fleet: Fleet) -> Request:
    per_node = fleet.shape.accelerators_per_node
    accelerators = draw(st.sampled_from([a for a in (1, 2, 4, 8, 16) if a <= per_node]))
    workers = draw(st.integers(1, max(1, len(fleet.nodes) * per_node // accelerators)))
    return Request(workers, accelerators, draw(st.sampled_from(["node", "domain", "block"])),
                   draw(st.sampled_from(["required", "preferred"])))


def fragmented(data: st.DataObject) -> Fleet:
    """A random fleet with some use first (up to three earlier gangs): fragments."""
    fleet = data.draw(fleets())
    for i in range(data.draw(st.integers(0, 3))):
        earlier = data.draw(requests(fleet))
        placed = place(fleet, earlier)
        if placed.ok:
            commit(fleet, placed, earlier, f"job{i}")
    return fleet


def check_placement(fleet: Fleet, request: Request, placed_ranks: tuple) -> None:
    assert [r.rank for r in placed_ranks] == list(range(request.workers))
    for name, node_ in fleet.nodes.items():
        assert 0 <= node_.used <= node_.capacity, name


@given(st.data())
@SETTINGS
def test_capacity_atomicity_ranks_and_policies(data: st.DataObject) -> None:
    fleet = data.draw(fleets())
    for i in range(data.draw(st.integers(1, 6))):
        request = data.draw(requests(fleet))
        before = fleet.snapshot()
        placed = place(fleet, request)
        assert fleet.snapshot() == before, "place() must not change the fleet"
        if not placed.ok:
            assert placed.reason and not placed.ranks
            continue
        assert len(placed.ranks) == request.workers, "all or nothing"
        assert all(fleet.nodes[h].usable for h in placed.hosts), "healthy, non-spare nodes"
        if request.unit == "domain" and request.policy == "required":
            uniform = all(n.capacity == fleet.shape.accelerators_per_node
                          for n in fleet.nodes.values())
            assert len(placed.domains) <= placed.min_domains   # larger nodes: fewer
            assert len(placed.domains) == placed.min_domains or not uniform
        if request.unit == "block" and request.policy == "required":
            assert len({fleet.domains[d].path for d in placed.domains}) == 1
        commit(fleet, placed, request, f"job{i}")
        check_placement(fleet, request, placed.ranks)


@given(st.data())
@SETTINGS
def test_a_balanced_gang_is_split_evenly_over_the_fewest_domains_that_allow_it(
        data: st.DataObject) -> None:
    """topology.balance: the per-domain counts differ by at most one; unit node or domain,
    preferred: over exactly the fewest domains whose free capacity allows an even split
    (found by brute force here); required domain: over the minimum or not at all."""
    fleet = fragmented(data)
    request = data.draw(requests(fleet))
    request = Request(request.workers, request.accelerators,
                      data.draw(st.sampled_from(["node", "domain"])), request.policy,
                      balance=True)
    caps = sorted((c for d in fleet.domains.values()
                   if (c := domain_capacity(d, request.accelerators)) > 0), reverse=True)
    placed = place(fleet, request)
    if not placed.ok:
        assert request.policy == "required" or fewest_even(caps, request.workers) > len(caps)
        return
    counts: dict[str, int] = {}
    for rank in placed.ranks:
        counts[rank.domain] = counts.get(rank.domain, 0) + 1
    assert max(counts.values()) - min(counts.values()) <= 1, counts
    even = next(k for k in range(1, len(caps) + 1)
                if any(all(c >= request.workers // k + (j < request.workers % k)
                           for j, c in enumerate(pick)) for pick in _subsets(caps, k)))
    if request.policy == "preferred" or request.unit == "node":
        assert len(counts) == even
    else:
        assert len(counts) <= placed.min_domains
    commit(fleet, placed, request, "balanced")
    check_placement(fleet, request, placed.ranks)


@given(st.data())
@SETTINGS
def test_every_slice_of_a_sliced_gang_stays_in_one_domain(data: st.DataObject) -> None:
    """topology.slice: each run of SIZE consecutive ranks lies in one domain, so every
    domain holds whole slices; with balance too, the domains' slice counts differ by at
    most one (or, unit block and preferred, the gang is inside one block: the documented
    trade); nothing is overcommitted."""
    fleet = fragmented(data)
    drawn = data.draw(requests(fleet))
    size = data.draw(st.sampled_from([1, 2, 3, 4, 8]))
    request = Request(size * data.draw(st.integers(1, 6)), drawn.accelerators, drawn.unit,
                      drawn.policy, balance=data.draw(st.booleans()), slice=size)
    placed = place(fleet, request)
    if not placed.ok:
        assert placed.reason and not placed.ranks
        return
    ranks = list(placed.ranks)
    for start in range(0, len(ranks), size):
        assert len({r.domain for r in ranks[start:start + size]}) == 1, ranks
    counts: dict[str, int] = {}
    for rank in ranks:
        counts[rank.domain] = counts.get(rank.domain, 0) + 1
    assert all(count % size == 0 for count in counts.values())
    if request.balance and max(counts.values()) - min(counts.values()) > size:
        # the one trade the API documents (spec.topology.balance): unit block, preferred,
        # stays inside one block unevenly before it spreads evenly across blocks
        blocks = {fleet.domains[d].path for d in counts}
        assert (request.unit, request.policy, len(blocks)) == ("block", "preferred", 1), \
            (counts, request)
    if request.unit == "block" and request.policy == "required":
        assert len({fleet.domains[d].path for d in placed.domains}) == 1
    commit(fleet, placed, request, "sliced")
    check_placement(fleet, request, placed.ranks)


def _subsets(descending: list[int], k: int) -> list[list[int]]:
    """Every choice of K capacities, each in descending order (small fleets: brute force)."""
    from itertools import combinations
    return [list(pick) for pick in combinations(descending, k)][:2000]


@given(st.data())
@SETTINGS
def test_k_whole_free_domains_serve_a_gang_needing_k(data: st.DataObject) -> None:
    fleet = data.draw(fleets())
    shape = fleet.shape
    assume(all(n.capacity == shape.accelerators_per_node for n in fleet.nodes.values()))
    whole = [d for d in fleet.domains.values()
             if is_pristine(d) and len(d.nodes) == shape.nodes_per_domain
             and all(n.healthy and n.name not in fleet.group_spares for n in d.nodes)]
    if not whole:
        return
    k = data.draw(st.integers(1, len(whole)))
    per_domain = (shape.nodes_per_domain - shape.spares_per_domain)
    workers = data.draw(st.integers((k - 1) * per_domain + 1, k * per_domain))
    placed = place(fleet, Request(workers, shape.accelerators_per_node))
    assert placed.ok, placed.reason
    assert len(placed.domains) == k == math.ceil(workers / per_domain)


@given(st.data())
@SETTINGS
def test_placing_then_releasing_restores_the_fleet(data: st.DataObject) -> None:
    fleet = data.draw(fleets())
    before = fleet.snapshot()
    owners = []
    for i in range(data.draw(st.integers(1, 5))):
        request = data.draw(requests(fleet))
        placed = place(fleet, request)
        if placed.ok:
            commit(fleet, placed, request, f"job{i}")
            owners.append(f"job{i}")
    for owner in data.draw(st.permutations(owners)):
        fleet.release_owner(owner)
    assert fleet.snapshot() == before


@given(st.data())
@SETTINGS
def test_replacement_never_leaves_a_required_domain(data: st.DataObject) -> None:
    fleet = data.draw(fleets())
    request = Request(data.draw(st.integers(1, 6)), fleet.shape.accelerators_per_node)
    placed = place(fleet, request)
    if not placed.ok:
        return
    commit(fleet, placed, request, "job")
    failed = data.draw(st.sets(st.sampled_from(placed.hosts), min_size=1))
    for name in failed:
        fleet.upsert_node(node(name, fleet.nodes[name].domain,
                               fleet.domains[fleet.nodes[name].domain].path[1],
                               fleet.shape.accelerators_per_node, ready=False))
    before = fleet.snapshot()
    result = replace(fleet, placed, failed, request, "job")
    assert fleet.snapshot() == before, "replace() must not change the fleet"
    old = {r.rank: r for r in placed.ranks}
    if result.action == "replace":
        assert result.moved is not None
        for rank, new_node in result.moved.items():
            assert fleet.nodes[new_node].domain == old[rank].domain
            assert fleet.nodes[new_node].healthy
        assert [r.rank for r in result.ranks] == list(range(request.workers))
    elif result.action == "move":
        assert len(result.ranks) == request.workers
        assert not {r.node for r in result.ranks} & failed
    else:
        assert result.action == "wait" and result.reason


@given(st.data())
@SETTINGS
def test_a_gang_one_domain_holds_goes_where_the_selection_per_network_group_puts_it(
        data: st.DataObject) -> None:
    """The one-scan choice for a gang that fits one domain (`_tightest_domain`) is the
    choice of the general selection (`_best_in_groups` at the innermost groups, k = 1),
    on fleets partly used by earlier gangs."""
    fleet = data.draw(fleets())
    for _ in range(data.draw(st.integers(0, 4))):  # earlier gangs leave fragments
        earlier = data.draw(requests(fleet))
        placed = place(fleet, earlier)
        if placed.ok:
            commit(fleet, placed, earlier, f"tj/ns/{len(fleet.pods)}")
    accelerators = data.draw(st.sampled_from([1, 2, 4, 8, 16]))
    caps = [(d, c) for d in fleet.ordered_domains()
            if (c := domain_capacity(d, accelerators)) >= 1]
    workers = data.draw(st.integers(1, max(c for _, c in caps))) if caps else 1
    assume(any(c >= workers for _, c in caps))
    levels = len(fleet.shape.network_levels)
    general = _best_in_groups(caps, workers, depth=levels, k=1)
    assert general is not None
    fast = _tightest_domain(caps, workers, levels)
    assert [(d.id, n) for d, n in fast.domains] == [(d.id, n) for d, n in general.domains]
    assert fast.score == general.score


@given(st.data())
@SETTINGS
def test_a_gang_within_some_domains_lands_only_there_and_is_not_refused_needlessly(
        data: st.DataObject) -> None:
    """Request.within (a serving unit's domains): every rank inside them; and a gang whose
    best placement anywhere lies inside them is placed within them too."""
    fleet = fragmented(data)
    within = frozenset(data.draw(st.sets(st.sampled_from(sorted(fleet.domains)), min_size=1)))
    anywhere = data.draw(requests(fleet))
    request = dataclasses.replace(anywhere, within=within)
    placed = place(fleet, request)
    if placed.ok:
        assert {r.domain for r in placed.ranks} <= within
        check_placement(fleet, request, placed.ranks)
    free = place(fleet, anywhere)
    if free.ok and set(free.domains) <= within:
        assert placed.ok, placed.reason
