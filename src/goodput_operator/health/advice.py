"""Checkpoint advice: the interval between saves that maximises a job's goodput, from
what its save costs (the SDK's timing of each save) and how often its group's nodes fail.

The failure rate comes from the nodes' incident scores (health.quarantine's lemon score:
+1 per quarantine the operator made, halving every `lemonHalfLifeDays`; a tenant's hold
adds nothing). A score decayed that way is, in expectation, the node's failure rate times
the decay's window, (h / ln 2)(1 - 2^(-age/h)) for a group AGE seconds old, so the sum over
the group's nodes over that window times the node count is the rate per node. Evidence
kept on the nodes survives an operator restart.

The interval is Daly's (2006) higher-order optimum for a save cost delta and a mean time
between failures M: sqrt(2 delta M) (1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9) - delta
for delta < 2M, else M. Young's first-order sqrt(2 delta M) is its leading term. The
recovery time does not move the optimum at this order: it is what each failure costs on
top, whatever the interval.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from goodput_operator import times

DAY = 86_400.0
MIN_WINDOW = 3_600.0  # a group younger than this has seen too little to say a rate
FAR = 2.0  # a job's interval this many times longer or shorter than advised is "far off"


def daly(save_seconds: float, mtbf_seconds: float) -> float:
    """The checkpoint interval (seconds of training between saves) that maximises goodput
    for a save that stalls training SAVE_SECONDS and a mean time between failures
    MTBF_SECONDS (Daly 2006, higher order)."""
    if save_seconds >= 2 * mtbf_seconds:
        return mtbf_seconds
    ratio = save_seconds / (2 * mtbf_seconds)
    return math.sqrt(2 * save_seconds * mtbf_seconds) * (
        1 + math.sqrt(ratio) / 3 + ratio / 9) - save_seconds


def window(half_life_days: float, age_seconds: float) -> float:
    """The seconds a decayed incident score counts, for a group AGE_SECONDS old."""
    h = half_life_days * DAY
    return float(h / math.log(2) * (1 - 0.5 ** (max(0.0, age_seconds) / h)))


@dataclass(frozen=True)
class Advice:
    """A job's checkpoint advice and what it rests on."""

    interval_seconds: float
    save_seconds: float
    mtbf_seconds: float
    node_failures_per_day: float  # per node, in the job's group
    measured_seconds: float | None  # the job's own interval between commits, if known

    @property
    def far_off(self) -> bool:
        """The job's own interval is over FAR times longer or shorter than advised."""
        return self.measured_seconds is not None and not (
            self.interval_seconds / FAR <= self.measured_seconds <= self.interval_seconds * FAR)


def save_seconds(history: Iterable[float]) -> float | None:
    """The job's save cost: the median stall of its recent saves (None: none timed)."""
    stalls = [s for s in history if s > 0]
    return statistics.median(stalls) if stalls else None


def measured(commits: Sequence[float]) -> float | None:
    """The job's own interval: the median gap between its recent commits."""
    ordered = sorted(commits)
    gaps = [b - a for a, b in itertools.pairwise(ordered) if b > a]
    return statistics.median(gaps) if gaps else None


def advise(scores: float, group_nodes: int, job_nodes: int, half_life_days: float,
           age_seconds: float, history: Sequence[Mapping[str, Any]]) -> Advice | None:
    """The advice for a job on JOB_NODES of a group of GROUP_NODES whose incident scores
    sum to SCORES, from the job's checkpoint HISTORY (status.checkpoint.history); None
    while there is nothing to rest it on: no save timed, no failure seen, a group too
    young."""
    stall = save_seconds(float(h.get("saveSeconds") or 0) for h in history)
    span = window(half_life_days, age_seconds)
    if stall is None or scores <= 0 or group_nodes <= 0 or job_nodes <= 0 \
            or age_seconds < MIN_WINDOW:
        return None
    per_node = scores / (group_nodes * span)  # failures per node-second
    mtbf = 1 / (per_node * job_nodes)
    commits = [t for h in history if (t := times.parse(h.get("time"))) is not None]
    return Advice(daly(stall, mtbf), stall, mtbf, per_node * DAY, measured(commits))
