"""How often a job's workers report: the leader keeps a gang near REPORTS_PER_SECOND."""

from __future__ import annotations

import pytest

from goodput_operator.health.cadence import (
    MAX_EVERY,
    REPORTS_PER_SECOND,
    WINDOW_SECONDS,
    Cadence,
    report_every,
)
from goodput_operator.health.hang import StepClock, from_progress, hung, window

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("case", "current", "rate", "every"), [
    ("nothing counted yet: as it was", 1, 0.0, 1),
    ("a small gang reports every step", 1, 64.0, 1),
    ("exactly the target stays", 1, 500.0, 1),
    ("2,048 workers at a 1 s step: 2,048/s -> every 8th (256/s)", 1, 2_048.0, 8),
    ("Rainier, 31,000 workers at a 5 s step: 6,200/s -> every 16th (388/s)", 1, 6_200.0, 16),
    ("at k=16 the job now sends 242/s (its step got slower): half of k would give 484, "
     "over half the target: kept", 16, 242.0, 16),
    ("at k=16 it sends 48/s (a much slower step): halved while half of k gives at most "
     "half the target", 16, 48.0, 4),
    ("an absurd rate stops at the ceiling", 1, 1e9, MAX_EVERY),
])
def test_the_leader_picks_the_smallest_power_of_two_that_keeps_a_job_near_the_target(
        case: str, current: int, rate: float, every: int) -> None:
    chosen = report_every(current, rate)
    assert chosen == every, case
    assert chosen & (chosen - 1) == 0, case  # a power of two: old and new k share steps
    if chosen < MAX_EVERY:
        assert rate * current / chosen <= REPORTS_PER_SECOND, case


def test_a_rate_between_a_quarter_and_the_whole_target_never_changes_k() -> None:
    """Hysteresis: a rate wandering near a boundary does not flip k to and fro."""
    for rate in (130.0, 200.0, 300.0, 488.0):
        assert report_every(2, rate) == 2, rate


def test_k_is_judged_from_what_arrived_over_a_window_never_from_a_burst() -> None:
    """A few reports in a burst (a test, a trainer reporting every hundredth step) are no
    rate: k changes only once a whole window of reports has been counted."""
    burst = Cadence()
    for i in range(9):
        assert burst.heard(100.0 + i * 0.001, step=100 * (i + 1)) == 1
    busy = Cadence()
    for i in range(int(WINDOW_SECONDS * 6_200) + 1):  # 6,200 reports a second
        k = busy.heard(100.0 + i / 6_200, step=i // 2_048 * 16)  # as asked
    assert k == 16 and busy.count == 0  # judged, and a new window begun


def test_the_operator_s_target_replaces_the_default() -> None:
    """--reports-per-job: 4 workers at a step a second (4/s) are over a target of 1/s, so
    they are asked for every 4th step; at the default they report every step."""
    low, default = Cadence(), Cadence()
    for i in range(int(WINDOW_SECONDS * 4) + 1):
        k_low = low.heard(100.0 + i / 4, step=(i // 4) * low.every, target=1)
        k_default = default.heard(100.0 + i / 4, step=i // 4)
    assert (k_low, k_default) == (4, 1)


def test_a_job_that_ignores_k_is_not_pushed_to_ever_larger_k() -> None:
    """Seen in bench.reports: a client that reports every step whatever k (not the SDK)
    sent 925/s; counting all of its reports, k doubled every window, 2 to 256, and its hang
    window grew with it. Only the steps k asks for count: half of them at k = 2."""
    ignoring = Cadence()
    for i in range(int(12 * WINDOW_SECONDS * 925)):  # twelve windows, every step
        k = ignoring.heard(100.0 + i / 925, step=i // 4)
    assert k == 2


def test_the_extra_steps_sent_whatever_k_do_not_raise_it() -> None:
    """At k = 4, 64 ranks at 20 steps a second send 320 reports a second, plus every
    rank's checkpoint step every 5 steps (not a multiple of 4): those are no reason for
    k = 8."""
    cadence = Cadence(every=4)
    for second in range(30):
        for step in range(20 * second, 20 * (second + 1)):
            if step % 4 == 0 or step % 5 == 0:
                for rank in range(64):
                    cadence.heard(100.0 + step / 20 + rank * 1e-5, step=step)
    assert cadence.every == 4


def test_the_hang_window_spans_k_steps_when_the_job_reports_every_kth() -> None:
    """A job reporting every 16th 5 s step is quiet for 80 s between reports: its hang
    window is 16 times its per-step window, and survives an operator restart."""
    every_step, every_16th = StepClock(0), StepClock(0, cadence=Cadence(every=16))
    for clock in (every_step, every_16th):
        clock.advance(0, 1000.0)
        clock.advance(16, 1080.0)  # 5 s a step
    assert window(every_step, 3, 10.0) == 15.0
    assert window(every_16th, 3, 10.0) == 240.0
    assert hung(every_16th, 0, 3, 10.0, 1080.0 + 100) is None
    assert "x 16 steps a report" in (hung(every_16th, 0, 3, 10.0, 1080.0 + 241) or "")
    restored = from_progress({"restart": 0, "step": 16, "time": "2026-11-28T00:00:00Z",
                              "every": 16})
    assert restored is not None and restored.every == 16
