"""Hang detection: a window of max(k x the median time per step, a floor) without a new step."""

from __future__ import annotations

import pytest

from goodput_operator.health.hang import StepClock, deadline, hung, window

T = 1_800_000_000.0


def clock(*steps: tuple[int, float], attempt: int = 0) -> StepClock:
    found = StepClock(attempt)
    for step, at in steps:
        found.advance(step, T + at)
    return found


def test_the_median_is_per_step_and_ignores_old_or_repeated_steps() -> None:
    c = clock((1, 0), (2, 2), (2, 3), (4, 6), (3, 9), (5, 8))  # 2 s, 2 s/step, 2 s
    assert (c.step, c.at, c.median()) == (5, T + 8, 2.0)


@pytest.mark.parametrize(("case", "steps", "now", "expected"), [
    ("no step yet: not judged", (), 10_000, None),
    ("one step: the floor alone", ((1, 0),), 29, None),
    ("one step, past the floor", ((1, 0),), 31, "no step for 31s after step 1 (hang window "
     "30s: no step time measured yet, at least 30s)"),
    ("slow steps widen the window", ((1, 0), (2, 10)), 10 + 99, None),
    ("and past it, a hang", ((1, 0), (2, 10)), 10 + 101, "no step for 101s after step 2 "
     "(hang window 100s: 10 x the median step time 10.00s, at least 30s)"),
])
def test_a_hang_is_no_new_step_for_the_window(case: str, steps: tuple[tuple[int, float], ...],
                                              now: float, expected: str | None) -> None:
    assert hung(clock(*steps), 0, 10, 30, T + now) == expected, case


def test_another_attempt_s_steps_are_not_judged_and_the_deadline_is_the_window_s_end() -> None:
    old = clock((1, 0), (2, 1), attempt=0)
    assert hung(old, 1, 10, 30, T + 10_000) is None and deadline(old, 1, 10, 30) is None
    assert window(old, 10, 30) == 30 and deadline(old, 0, 10, 30) == T + 1 + 30
