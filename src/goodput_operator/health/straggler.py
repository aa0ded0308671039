"""Straggler detection from the step reports workers already send: in synchronous training
one slow rank (a throttled device, a bad link, a noisy neighbour) sets the pace of the
whole gang, and nothing in Kubernetes sees it.

Each rank's pace is its time per step: the `computeSeconds` metric when the worker reports
it (its own work in the step, without the wait in collectives: the signal that singles out
the slow rank in synchronous training), else the time between its consecutive reports
(which tells ranks apart only where they report before they synchronise). A rank is a
straggler when the median of its recent paces is more than `factor` times the median of
its peers' medians, over at least `min_steps` steps of each: a median over many steps, so a
single slow step (a checkpoint, a collection) is not one. And only when what it costs the
gang, its excess over its peers, is at least MIN_SHARE of the gang's step: a rank at 6 ms of
work against its peers' 4 ms is 1.5x as slow, but in a 300 ms step it costs nothing worth a
condition, let alone a quarantine. Pure: the operator keeps one Pace per job attempt, fed
by the reports.
"""

from __future__ import annotations

import bisect
import statistics
from collections import deque
from dataclasses import dataclass, field

WINDOW = 32  # recent steps per rank the median is taken over
METRIC = "computeSeconds"  # the step metric that gives a rank's own time per step
MIN_SHARE = 0.05  # a straggler costs the gang at least this share of its step


@dataclass
class RankPace:
    """One rank's recent seconds per step, and its newest report."""

    node: str
    paces: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    step: int = -1
    at: float = 0.0
    measured: bool = False  # its paces come from computeSeconds, not report intervals

    def median(self) -> float:
        return statistics.median(self.paces)


@dataclass
class Pace:
    """The ranks' paces in one attempt of a job."""

    attempt: int
    ranks: dict[int, RankPace] = field(default_factory=dict)
    # the gang's recent seconds per step, from the time between any rank's reports
    steps: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))

    def step_seconds(self) -> float:
        """The gang's seconds per step (0 until two reports of a rank have come)."""
        return statistics.median(self.steps) if self.steps else 0.0

    def record(self, rank: int, node: str, step: int, at: float,
               compute_seconds: float | None = None) -> None:
        """A report of STEP from RANK on NODE at AT (COMPUTE_SECONDS: its own time for
        the step, when reported). A rank that moved to another node starts afresh."""
        pace = self.ranks.get(rank)
        if pace is None or pace.node != node:
            pace = self.ranks[rank] = RankPace(node)
        if step <= pace.step:
            return
        between = (at - pace.at) / (step - pace.step) if pace.step >= 0 and at > pace.at \
            else None
        if between is not None:
            self.steps.append(between)
        if compute_seconds is not None and compute_seconds >= 0:
            if not pace.measured:
                pace.paces.clear()  # never mix the two measures
            pace.measured = True
            pace.paces.append(compute_seconds)
        elif not pace.measured and between is not None:
            pace.paces.append(between)
        pace.step, pace.at = step, at


@dataclass(frozen=True)
class Straggler:
    rank: int
    node: str
    median: float  # its seconds per step
    peers: float  # the median of its peers' medians
    measured: bool

    @property
    def evidence(self) -> str:
        basis = METRIC if self.measured else "time between its step reports"
        return (f"rank {self.rank} on {self.node}: {self.median:.3f}s per step against its "
                f"peers' {self.peers:.3f}s ({self.median / self.peers:.1f}x, {basis})")


def stragglers(pace: Pace, factor: float, min_steps: int) -> list[Straggler]:
    """The ranks persistently slower than FACTOR x their peers, and by at least MIN_SHARE
    of the gang's step, slowest first. Needs at least two ranks with MIN_STEPS paces each
    (one rank has no peers to be slower than); compares only ranks measured the same way."""
    found: list[Straggler] = []
    worth = MIN_SHARE * pace.step_seconds()
    for measured in (True, False):
        medians = {rank: (p.median(), p.node) for rank, p in pace.ranks.items()
                   if p.measured == measured and len(p.paces) >= min_steps}
        if len(medians) < 2:
            continue
        ordered = sorted(m for m, _ in medians.values())
        for rank, (median, node) in medians.items():
            peers = _median_without(ordered, median)
            if peers > 0 and median > factor * peers and median - peers >= worth:
                found.append(Straggler(rank, node, median, peers, measured))
    return sorted(found, key=lambda s: -s.median / s.peers)


def _median_without(ordered: list[float], value: float) -> float:
    """The median of ORDERED (sorted) with one occurrence of VALUE taken out, without a
    copy: every rank is compared with its peers, and a gang has thousands."""
    skip = bisect.bisect_left(ordered, value)
    size = len(ordered) - 1

    def at(index: int) -> float:
        return ordered[index] if index < skip else ordered[index + 1]
    if size % 2:
        return at(size // 2)
    return (at(size // 2 - 1) + at(size // 2)) / 2
