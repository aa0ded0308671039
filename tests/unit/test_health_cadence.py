"""How often a job's workers report: the leader keeps a gang near REPORTS_PER_SECOND."""

from __future__ import annotations

import pytest

from goodput_operator.health.cadence import MAX_EVERY, REPORTS_PER_SECOND, report_every
from goodput_operator.health.hang import StepClock, from_progress, hung, window

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("case", "current", "workers", "step_seconds", "every"), [
    ("a step time not measured yet: as it was", 1, 31_000, None, 1),
    ("a small gang reports every step", 1, 64, 1.0, 1),
    ("2,048 workers at 1 s: 2,048/s -> every 8th (256/s)", 1, 2_048, 1.0, 8),
    ("Rainier: 31,000 workers at 5 s, 6,200/s -> every 16th (388/s)", 1, 31_000, 5.0, 16),
    ("exactly the target stays", 1, 500, 1.0, 1),
    ("the step got slower, but half of k would still be over a quarter: kept", 16, 31_000,
     8.0, 16),
    ("the step got much slower (775/s every step): halved while half of k gives at most "
     "half the target", 16, 31_000, 40.0, 4),
    ("an absurd rate stops at the ceiling", 1, 10**9, 0.001, MAX_EVERY),
])
def test_the_leader_picks_the_smallest_power_of_two_that_keeps_a_job_near_the_target(
        case: str, current: int, workers: int, step_seconds: float | None,
        every: int) -> None:
    chosen = report_every(current, workers, step_seconds)
    assert chosen == every, case
    assert chosen & (chosen - 1) == 0, case  # a power of two: old and new k share steps
    if step_seconds is not None and chosen < MAX_EVERY:
        assert workers / (chosen * step_seconds) <= REPORTS_PER_SECOND, case


def test_a_rate_between_a_quarter_and_the_whole_target_never_changes_k() -> None:
    """Hysteresis: a step time wandering near a boundary does not flip k to and fro."""
    for step_seconds in (2.1, 3.0, 4.0, 6.0, 7.9):  # 2,048 workers at k=2: 130-488/s
        assert report_every(2, 2_048, step_seconds) == 2, step_seconds


def test_the_hang_window_spans_k_steps_when_the_job_reports_every_kth() -> None:
    """A job reporting every 16th 5 s step is quiet for 80 s between reports: its hang
    window is 16 times its per-step window, and survives an operator restart."""
    every_step, every_16th = StepClock(0, every=1), StepClock(0, every=16)
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
