"""Straggler detection: one rank persistently slower than its peers, with its node."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goodput_operator.health.straggler import Pace, _median_without, stragglers

pytestmark = pytest.mark.unit


def paced(per_rank: dict[int, list[float]], measured: bool = True) -> Pace:
    """A pace whose rank R on node nR reported these seconds per step (as computeSeconds,
    or as the time between its reports)."""
    pace = Pace(0)
    for rank, seconds in per_rank.items():
        at = 0.0
        for step, took in enumerate(seconds):
            at += took
            pace.record(rank, f"n{rank}", step, at, took if measured else None)
    return pace


STEADY = [1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1.0, 1.0, 1.02]


@pytest.mark.parametrize(("case", "per_rank", "measured", "slow"), [
    ("a rank at twice its peers' pace, every step",
     {0: STEADY, 1: STEADY, 2: [2 * s for s in STEADY], 3: STEADY}, True, [2]),
    ("one slow step (a checkpoint, a collection) is not a straggler",
     {0: STEADY, 1: [*STEADY[:-1], 9.0], 2: STEADY}, True, []),
    ("within the factor: ordinary spread",
     {0: STEADY, 1: [1.3 * s for s in STEADY], 2: STEADY}, True, []),
    ("too few steps to judge",
     {0: STEADY[:5], 1: [3 * s for s in STEADY[:5]]}, True, []),
    ("a lone rank has no peers",
     {0: [5 * s for s in STEADY]}, True, []),
    ("two ranks: the slower one is judged against the other",
     {0: STEADY, 1: [2 * s for s in STEADY]}, True, [1]),
    ("from the time between reports when no computeSeconds comes",
     {0: STEADY, 1: STEADY, 2: [2 * s for s in STEADY]}, False, [2]),
])
def test_stragglers(case: str, per_rank: dict[int, list[float]], measured: bool,
                    slow: list[int]) -> None:
    found = stragglers(paced(per_rank, measured), factor=1.5, min_steps=8)
    assert [s.rank for s in found] == slow, case
    for straggler in found:
        assert straggler.node == f"n{straggler.rank}"
        assert f"rank {straggler.rank} on n{straggler.rank}" in straggler.evidence


def test_a_rank_slower_by_a_sliver_of_the_step_is_no_straggler() -> None:
    """Seen on real nodes: rank 0 worked 6 ms a step against its peers' 4 ms (1.5x) in a
    300 ms step, beside a truly slow rank 2 (304 ms of work). Only rank 2 costs the gang."""
    pace = Pace(0)
    work = {0: 0.0062, 1: 0.004, 2: 0.304, 3: 0.004}
    for step in range(20):
        for rank, seconds in work.items():
            pace.record(rank, f"n{rank}", step, 0.31 * step + rank * 1e-4, seconds)
    assert pace.step_seconds() == pytest.approx(0.31)
    assert [s.rank for s in stragglers(pace, factor=1.5, min_steps=8)] == [2]
    fast = Pace(0)  # the same work in a 10 ms step: rank 0's 2 ms is a fifth of it
    for step in range(20):
        for rank, seconds in {0: 0.0062, 1: 0.004, 2: 0.004}.items():
            fast.record(rank, f"n{rank}", step, 0.01 * step + rank * 1e-4, seconds)
    assert [s.rank for s in stragglers(fast, factor=1.5, min_steps=8)] == [0]


def test_the_evidence_says_how_much_slower_and_by_which_measure() -> None:
    [found] = stragglers(paced({0: STEADY, 1: STEADY, 2: [2 * s for s in STEADY]}), 1.5, 8)
    assert found.evidence == ("rank 2 on n2: 2.000s per step against its peers' 1.000s "
                              "(2.0x, computeSeconds)")


def test_a_rank_moved_to_another_node_starts_afresh_and_old_reports_change_nothing() -> None:
    pace = paced({0: STEADY, 1: [3 * s for s in STEADY]})
    pace.record(1, "spare", 100, 1000.0, 1.0)
    assert len(pace.ranks[1].paces) == 1 and pace.ranks[1].node == "spare"
    pace.record(0, "n0", 3, 2000.0, 50.0)             # an older step than its newest
    assert len(pace.ranks[0].paces) == len(STEADY)
    assert stragglers(pace, 1.5, 8) == []


@given(st.lists(st.floats(0.01, 100), min_size=2, max_size=40), st.data())
def test_the_median_without_one_value_is_the_median_of_the_rest(values: list[float],
                                                                 data: st.DataObject) -> None:
    value = data.draw(st.sampled_from(values))
    rest = list(values)
    rest.remove(value)
    assert _median_without(sorted(values), value) == pytest.approx(statistics.median(rest))
