"""How often a job's workers report: every k-th step, k chosen by the leader.

Every worker of a gang reports every step it is asked to, and blocks its step on the
answer; a 31,000-worker job at a 5 s step reporting every step would send 6,200 reports a
second, more than one process can judge. So the leader asks each job for every k-th step
(and every step a checkpoint is taken at: its vote verifies the checkpoint), with k the
smallest power of two that keeps the job at or under REPORTS_PER_SECOND.

Why a power of two: every rank reports the steps that are multiples of its k, and ranks
learn a new k one answer apart. While k doubles or halves, the steps both old and new k
report are the multiples of the larger one, so every such step still gets every rank's
vote; the others are judged with the votes that came (health.sdc.Ledger). k grows as soon
as the job's rate passes the target, and halves only once the rate it would then give is
at most half the target (the rate now a quarter of it), so a step time near a boundary
does not flip it to and fro.

The hang window and the straggler paces read what is reported: the window is k times as
long (health.hang.window), the paces are per step already (health.straggler). Pure.
"""

from __future__ import annotations

REPORTS_PER_SECOND = 500.0  # per job: what one leader answers at p99 well under 100 ms
MAX_EVERY = 1024  # a job never goes quieter than this many steps between reports


def report_every(current: int, workers: int, step_seconds: float | None,
                 target: float = REPORTS_PER_SECOND) -> int:
    """The k a job of WORKERS ranks, at STEP_SECONDS a step (None: not yet measured),
    should report at, given CURRENT (a power of two, 1 at first)."""
    if step_seconds is None or step_seconds <= 0 or workers <= 0:
        return max(1, current)
    every = max(1, current)

    def rate(k: int) -> float:
        return workers / (k * step_seconds)

    while rate(every) > target and every < MAX_EVERY:
        every *= 2
    while every > 1 and rate(every // 2) <= target / 2:
        every //= 2
    return every
