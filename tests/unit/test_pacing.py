"""The bulk writes' limit follows the API server's latency: AIMD, once per round."""

from __future__ import annotations

import pytest

from goodput_operator.controllers.pacing import FLOOR, SLOW_FACTOR, SLOW_FLOOR, WriteLimit

pytestmark = pytest.mark.unit
QUICK = 0.02  # an idle API server's pod create
SLOW = QUICK * SLOW_FACTOR * 3


def paced(limit: float = 0.0) -> WriteLimit:
    """A limit (the ceiling, unless LIMIT) that has seen a quick write (its pace)."""
    paced_ = WriteLimit(16, limit=limit)
    paced_.quickest = QUICK
    return paced_


def test_slow_writes_halve_the_limit_once_per_round_down_to_the_floor() -> None:
    limit = paced()
    assert limit.limit == 16
    for i in range(16):  # a round of 16 writes, all started before any came back slow
        limit.observe(started=0.0, ended=SLOW + i * 0.001)
    assert limit.limit == 8  # one halving for the round, not 16
    limit.observe(started=1.0, ended=1.0 + SLOW)  # a write of the next round: news
    assert limit.limit == max(4, FLOOR)
    for round_ in range(2, 10):
        limit.observe(started=float(round_), ended=round_ + SLOW)
    assert limit.limit == limit.floor == FLOOR


def test_quick_writes_grow_it_back_by_about_one_a_round_up_to_the_ceiling() -> None:
    limit = paced(limit=4)
    for _ in range(4):  # one round at 4 in flight
        limit.observe(started=0.0, ended=QUICK)
    assert 4.9 < limit.limit < 5.0
    for _ in range(1000):
        limit.observe(started=0.0, ended=QUICK)
    assert limit.limit == 16


@pytest.mark.parametrize(("in_flight", "limit", "admits"), [
    (0, 16.0, True), (15, 16.0, True), (16, 16.0, False),
    (4, 4.9, False),  # a fraction of a write is not one
    (1, 2.0, True), (2, 2.0, False),
])
def test_a_write_is_admitted_only_under_the_whole_limit(in_flight: int, limit: float,
                                                         admits: bool) -> None:
    pace = WriteLimit(16, limit=limit)
    pace.in_flight = in_flight
    assert pace.admits() is admits


@pytest.mark.parametrize(("case", "quickest", "took", "halves"), [
    ("4x an idle 20 ms create: queueing", 0.02, 0.081, True),
    ("3x it: not yet", 0.02, 0.06, False),
    ("a 2 ms server's 45 ms write is jitter, under the floor", 0.002, SLOW_FLOOR * 0.9, False),
    ("a slow machine's 100 ms pace: 300 ms is no queue", 0.1, 0.3, False),
    ("... and 500 ms is", 0.1, 0.5, True),
])
def test_slow_is_relative_to_the_quickest_write_seen(case: str, quickest: float, took: float,
                                                     halves: bool) -> None:
    limit = WriteLimit(16)
    limit.quickest = quickest
    limit.observe(started=10.0, ended=10.0 + took)
    assert (limit.limit < 16) is halves, case


def test_the_first_write_sets_the_pace_and_is_not_judged_against_nothing() -> None:
    limit = WriteLimit(16)
    limit.observe(started=0.0, ended=0.3)  # the first: it is the quickest seen
    assert limit.quickest == pytest.approx(0.3) and limit.limit > 15
