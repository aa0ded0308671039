"""Hang detection from the step reports workers already send: a collective that hangs
leaves every pod Running and would count as goodput for ever.

A job's attempt is hung when its newest step is older than max(m x its recent median time
per step x the steps between its reports, a floor): m absorbs ordinary jitter, the floor
checkpoint saves and compilation.
Only an attempt that has reported a step is judged, so jobs that never report keep the
behaviour they had. Pure: the operator keeps one StepClock per job, fed by the reports.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from goodput_operator import times
from goodput_operator.health.cadence import REPORTS_PER_SECOND, Cadence

HISTORY = 32  # recent advances the median is taken over


@dataclass
class StepClock:
    """The newest step an attempt has reported, when, and the time per step of its recent
    advances (a report of an older or equal step changes nothing)."""

    attempt: int
    step: int = -1
    at: float = 0.0
    per_step: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    # how often the attempt reports (health.cadence): every k-th step, k steps a report
    cadence: Cadence = field(default_factory=Cadence)

    def advance(self, step: int, at: float) -> None:
        if step <= self.step:
            return
        if self.step >= 0 and at > self.at:
            self.per_step.append((at - self.at) / (step - self.step))
        self.step, self.at = step, at

    def heard(self, step: int, at: float, target: float = REPORTS_PER_SECOND) -> int:
        """A report of STEP received at AT: the newest step advances and the cadence counts
        it (against TARGET reports a second); returns the k to answer with."""
        self.advance(step, at)
        return self.cadence.heard(at, step, target)

    @property
    def every(self) -> int:
        return self.cadence.every

    def median(self) -> float | None:
        return statistics.median(self.per_step) if self.per_step else None


def from_progress(progress: Mapping[str, Any] | None) -> StepClock | None:
    """A clock from status.progress (the newest step the previous leader recorded, and its
    attempt): after an operator restart a job already hung is still judged, by the floor
    until its steps are timed again."""
    restart, step = (progress or {}).get("restart"), (progress or {}).get("step")
    at = times.parse((progress or {}).get("time"))
    if not isinstance(restart, int) or not isinstance(step, int) or at is None:
        return None
    every = (progress or {}).get("every")
    return StepClock(restart, step, at, cadence=Cadence(
        every if isinstance(every, int) and every > 1 else 1))


def judged(clock: StepClock | None, attempt: int) -> bool:
    """Whether ATTEMPT has reported a step, so that its steps stopping is a hang."""
    return clock is not None and clock.attempt == attempt and clock.step >= 0


def window(clock: StepClock, multiple: int, floor: float) -> float:
    """Seconds without a new step after which the attempt is hung: MULTIPLE times the
    time between two reports (k steps, when the job reports every k-th)."""
    median = clock.median()
    return max(floor, multiple * median * clock.every) if median is not None else floor


def hung(clock: StepClock | None, attempt: int, multiple: int, floor: float, now: float
         ) -> str | None:
    """Why ATTEMPT is hung at NOW, or None (no step reported in it yet, or one recently)."""
    if clock is None or not judged(clock, attempt):
        return None
    limit = window(clock, multiple, floor)
    if now - clock.at < limit:
        return None
    median = clock.median()
    reports = f" x {clock.every} steps a report" if clock.every > 1 else ""
    basis = (f"{multiple} x the median step time {median:.2f}s{reports}"
             if median is not None else "no step time measured yet")
    return (f"no step for {now - clock.at:.0f}s after step {clock.step} (hang window "
            f"{limit:.0f}s: {basis}, at least {floor:.0f}s)")


def deadline(clock: StepClock | None, attempt: int, multiple: int, floor: float
             ) -> float | None:
    """When ATTEMPT will be hung unless a new step arrives (a pass must look then: a hung
    job sends nothing that would wake one)."""
    if clock is None or not judged(clock, attempt):
        return None
    return clock.at + window(clock, multiple, floor)
