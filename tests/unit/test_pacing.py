"""The bulk writes' limit follows the API server's latency: AIMD, once per round."""

from __future__ import annotations

import pytest

from goodput_operator.controllers.pacing import SLOW_WRITE_SECONDS, WriteLimit

pytestmark = pytest.mark.unit
QUICK, SLOW = SLOW_WRITE_SECONDS / 2, SLOW_WRITE_SECONDS * 3


def test_slow_writes_halve_the_limit_once_per_round_down_to_the_floor() -> None:
    limit = WriteLimit(16)
    assert limit.limit == 16
    for i in range(16):  # a round of 16 writes, all started before any came back slow
        limit.observe(started=0.0, ended=SLOW + i * 0.001)
    assert limit.limit == 8  # one halving for the round, not 16
    limit.observe(started=1.0, ended=1.0 + SLOW)  # a write of the next round: news
    assert limit.limit == 4
    for round_ in range(2, 10):
        limit.observe(started=float(round_), ended=round_ + SLOW)
    assert limit.limit == limit.floor == 2


def test_quick_writes_grow_it_back_by_about_one_a_round_up_to_the_ceiling() -> None:
    limit = WriteLimit(16, limit=4)
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
