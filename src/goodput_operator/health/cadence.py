"""How often a job's workers report: every k-th step, k chosen by the leader.

Every worker of a gang reports every step it is asked to; a 31,000-worker job at a 5 s
step reporting every step would send 6,200 reports a second, more than one process can
judge. So the leader asks each job for every k-th step (and every step a checkpoint is
taken at: its vote verifies the checkpoint), with k the smallest power of two that keeps
the job at or under REPORTS_PER_SECOND, judged from the reports of the steps it asked for
over the last WINDOW_SECONDS (`Cadence`).

Why a power of two: every rank reports the steps that are multiples of its k, and ranks
learn a new k one answer apart. While k doubles or halves, the steps both old and new k
report are the multiples of the larger one, so every such step still gets every rank's
vote; the others are judged with the votes that came (health.sdc.Ledger). k grows as soon
as the job's rate passes the target, and halves only once the rate it would then give is
at most half the target (the rate now a quarter of it), so a rate near a boundary does
not flip it to and fro.

Each rank sends its report of a voted step rank % k steps later (sdk.spread_phase), so
the gang's reports of one voted step come over the k steps to the next, not all at once:
what is counted here is the voted steps' reports, whenever they arrive.

The hang window and the straggler paces read what is reported: the window is k times as
long (health.hang.window), the paces are per step already (health.straggler). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

REPORTS_PER_SECOND = 500  # per job: one leader answered 500/s at 1 ms p50 (bench.reports);
# the operator's --reports-per-job sets another
MAX_EVERY = 1024  # a job never goes quieter than this many steps between reports
WINDOW_SECONDS = 5.0  # the job's reports are counted over this long before k is judged


def report_every(current: int, rate: float, target: float = REPORTS_PER_SECOND) -> int:
    """The k a job should report at, given CURRENT (a power of two, 1 at first) and the
    RATE of reports a second it sent at CURRENT: every k-th step sends about
    RATE x CURRENT / k a second."""
    every = max(1, current)
    if rate <= 0:
        return every

    def at(k: int) -> float:
        return rate * every / k

    chosen = every
    while at(chosen) > target and chosen < MAX_EVERY:
        chosen *= 2
    while chosen > 1 and at(chosen // 2) <= target / 2:
        chosen //= 2
    return chosen


@dataclass
class Cadence:
    """One job's k, judged from the reports the leader received: counted over at least
    WINDOW_SECONDS (a burst of a few reports is no rate), then k is set anew. Measuring
    what arrives, not guessing from the step time, keeps a trainer that reports only
    every hundredth step by its own choice at k = 1."""

    every: int = 1
    since: float | None = None  # when the current window began
    count: int = 0  # reports in it

    def heard(self, now: float, step: int, target: float = REPORTS_PER_SECOND) -> int:
        """A report of STEP received at NOW; returns k, judged against TARGET reports a
        second. Only the steps k asks for count: the others (a checkpoint's, a NaN's, or
        every step of a client that ignores k) are not what k can thin, and counting them
        would double k every window for nothing (and stretch the job's hang window with
        it)."""
        if self.since is None:  # the window opens; it counts the reports after this one
            self.since = now
            return self.every
        if step % self.every == 0:
            self.count += 1
        elapsed = now - self.since
        if elapsed >= WINDOW_SECONDS:
            self.every = report_every(self.every, self.count / elapsed, target)
            self.since, self.count = now, 0
        return self.every
