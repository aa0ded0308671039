"""The autoscaler: metric values -> desired replicas, without flapping. Pure.

Per metric, an HPA-style ratio against the target (ignored within the tolerance); the
largest recommendation wins. Recommendations are remembered: scaling up uses the smallest
of the scale-up window, scaling down the largest of the scale-down window (so a brief dip
never removes replicas), then rate policies bound the step. Two things go beyond the HPA:
panic mode (a burst beyond `threshold` x capacity scales up at once, skipping the window
and the rate limit, and blocks scale-down for a while), and capacity awareness (never
more replicas than free domains can host; the caller reports ScalingLimited).
Missing or stale metrics hold the current size; scale to zero only after a measured idle.

RequestRate sizes from the arrival rate (arrivals / what one replica serves): the replicas
that keep up. With a QueueDepth metric beside it, the backlog adds the replicas that drain
the queue within its target (queue / per-replica queue target), and only while it lasts:
the scale-down window remembers the arrival rate's need, not the backlog's, so the peak a
burst's backlog asked for is released as soon as the queue has drained.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from goodput_operator.api.inferenceendpoint import Scaling, ScalingRules

PANIC_HOLD_SECONDS = 60.0  # no scale-down this long after the last panic
RISE_SAMPLES = 16  # RequestRate values a rise is fitted to, across lookaheadSeconds at most
# The HPA's default rate limits (behavior unset): up max(4 pods, 100%)/15 s, down 100%/15 s
DEFAULT_UP = (("Replicas", 4, 15), ("Percent", 100, 15))
DEFAULT_DOWN = (("Percent", 100, 15),)
PER_REPLICA = ("QueueDepth", "Concurrency", "TokensPerSecond", "RequestRate")
RATIO = ("TTFTp95", "KVCacheUtilization")  # not a total: the replicas' level against target


@dataclass(frozen=True)
class Sample:
    """One metric's value now. TOTAL for the endpoint (queue depth summed over replicas,
    tokens/s summed), or the level itself for the RATIO types (TTFTp95's latency, the
    average KV-cache use); None when missing or stale."""

    type: str
    target: float
    value: float | None
    name: str = ""


@dataclass
class History:
    """What the autoscaler remembers between evaluations (per endpoint)."""

    # time, replicas wanted, of which lasting (without a backlog that drains)
    recommendations: list[tuple[float, int, int]] = field(default_factory=list)
    changes: list[tuple[float, int, int]] = field(default_factory=list)  # time, from, to
    panic_until: float = 0.0
    idle_since: float | None = None
    last: dict[str, tuple[float, float]] = field(default_factory=dict)  # metric: time, value
    burst: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # panic window
    # RequestRate's values over the last lookaheadSeconds (RISE_SAMPLES at most): its rise
    rates: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    # when this history began and the replicas found then: the scale-down window holds them
    # as one of its recommendations, as the HPA seeds its window when it first sees an
    # object. Else a fresh history (a new endpoint, a restarted operator, a lowered
    # minReplicas after a quiet spell) drops replicas that serve before the window has
    # seen a single demand, on a metric still filling its rate window.
    first_seen: tuple[float, int] | None = None


@dataclass(frozen=True)
class Decision:
    desired: int
    reason: str
    metrics: dict[str, str]
    limited: str | None = None  # why fewer than recommended (capacity, maxReplicas)
    capacity_limited: bool = False  # limited by the free domains, not by maxReplicas
    unavailable: str | None = None  # metrics missing/stale: size held
    panic: bool = False


def metric_recommendation(sample: Sample, current: int) -> float:
    """Replicas this one metric asks for (fractional)."""
    assert sample.value is not None
    if sample.type in PER_REPLICA or sample.type == "PromQL":
        return sample.value / sample.target  # totals: replicas = total / per-replica target
    return max(current, 1) * sample.value / sample.target  # a level: scale by the ratio


def recommend(samples: Sequence[Sample], current: int, spec: Scaling, history: History,
              now: float, capacity: int | None = None) -> Decision:
    """Desired replicas now. SPEC: the endpoint's `Scaling` model. CAPACITY: the most
    replicas the fleet can host now (existing + what free domains hold), if known."""
    values = {s.name or s.type: ("missing" if s.value is None else f"{s.value:.4g}")
              for s in samples}
    missing = [s.name or s.type for s in samples if s.value is None]
    if missing:
        return Decision(current, f"holding {current}: no fresh value for "
                        f"{', '.join(missing)}", values,
                        unavailable=f"metric(s) {', '.join(missing)} missing or stale")
    # a latency is no demand (it outlives the requests); cache in use is
    demand = sum(s.value or 0.0 for s in samples if s.type != "TTFTp95")
    seen, samples = samples, [_ahead(s, spec, history, now) for s in samples]
    backlog = _backlog(samples)
    wanted = lasting = 0
    why = "no demand"
    for sample, as_seen in zip(samples, seen, strict=True):
        raw = metric_recommendation(sample, current)
        drains = backlog if backlog is not None and sample.type == "RequestRate" else 0.0
        replicas = _within_tolerance(raw + drains, current, spec.tolerance)
        if backlog is None or sample.type != "QueueDepth":  # the queue is the backlog's
            # a rise's projection, like a backlog, asks only while it lasts: the window
            # holds the rate as seen, so a burst's overshoot is not kept for 300 s
            now_raw = metric_recommendation(as_seen, current) \
                if sample.type == "RequestRate" else raw
            lasting = max(lasting, _within_tolerance(now_raw, current, spec.tolerance))
        if replicas > wanted or (replicas == wanted and why == "no demand"):
            wanted = replicas
            why = (f"{sample.name or sample.type} {sample.value:.4g} vs target "
                   f"{sample.target:.4g}" + (f" plus a backlog of {backlog:.3g} replicas"
                                             if drains else "")
                   + (" (within tolerance)" if replicas == current and current else ""))
    panic = _panic(samples, current, spec, history, now)
    wanted = _idle(wanted, demand, current, spec, history, now)
    if backlog is None or wanted == 0:
        lasting = wanted
    if history.first_seen is None:
        history.first_seen = (now, current)
    history.recommendations.append((now, wanted, min(wanted, max(lasting, 1))))
    window = max(spec.scale_up.stabilization_seconds, spec.scale_down.stabilization_seconds)
    history.recommendations = [r for r in history.recommendations if r[0] >= now - window]
    desired, why = _stabilize(wanted, current, spec, history, now, panic, why,
                              math.ceil(backlog or 0.0))
    bounded = max(spec.min_replicas, min(spec.max_replicas, desired))
    limited, short = None, False
    if bounded < desired:
        limited = f"{desired} wanted, scaling.maxReplicas is {spec.max_replicas}"
    if capacity is not None and bounded > max(capacity, current):
        limited = (f"{bounded} wanted, the free domains can host only {max(capacity, current)}"
                   " replica(s) now")
        bounded, short = max(capacity, current), True
    if bounded != current:
        history.changes.append((now, current, bounded))
        history.changes = [c for c in history.changes if c[0] >= now - 1800]
    return Decision(bounded, why, values, limited=limited, capacity_limited=short, panic=panic)


def _within_tolerance(raw: float, current: int, tolerance: float) -> int:
    """RAW replicas as a count: the current one while the ratio stays within TOLERANCE."""
    ratio = raw / current if current else math.inf if raw > 0 else 1.0
    return current if current and abs(ratio - 1) <= tolerance else math.ceil(raw)


def _backlog(samples: Sequence[Sample]) -> float | None:
    """Replicas that drain the queue within its target, for a RequestRate metric to add;
    None unless the endpoint scales on both a RequestRate and a QueueDepth metric."""
    queues = [(s.value or 0.0) / s.target for s in samples if s.type == "QueueDepth"]
    if not queues or not any(s.type == "RequestRate" for s in samples):
        return None
    return max(queues)


def _ahead(sample: Sample, spec: Scaling, history: History, now: float) -> Sample:
    """SAMPLE moved along its trend by `lookaheadSeconds`: a queue-like metric along its
    change since the last evaluation (never below zero), the arrival rate along its rise
    (`_rising`)."""
    lookahead = getattr(spec, "lookahead_seconds", 0)
    if sample.type == "RequestRate":
        return _rising(sample, lookahead, history, now)
    key = sample.name or sample.type
    previous = history.last.get(key)
    assert sample.value is not None
    history.last[key] = (now, sample.value)
    if not lookahead or previous is None or sample.type not in ("QueueDepth", "Concurrency") \
            or now <= previous[0]:
        return sample
    slope = (sample.value - previous[1]) / (now - previous[0])
    return Sample(sample.type, sample.target, max(0.0, sample.value + slope * lookahead),
                  sample.name)


def _rising(sample: Sample, lookahead: float, history: History, now: float) -> Sample:
    """The arrival rate where its rise over the last LOOKAHEAD seconds takes it LOOKAHEAD
    seconds from now (the least-squares slope of the rates seen, three at least). Replicas
    asked for now serve only after their start-up, so a rising rate is sized for when they
    do; a falling one is never projected down: a released replica stops costing at once,
    and the scale-down window would hold it anyway."""
    key = sample.name or sample.type
    assert sample.value is not None
    kept = [(t, v) for t, v in history.rates.get(key, []) if t >= now - lookahead]
    seen = [*kept, (now, sample.value)]
    # at most RISE_SAMPLES kept across the window, however short the interval: a tenant's
    # lookaheadSeconds 3600 at intervalSeconds 1 would otherwise keep 3,600 per endpoint
    if not kept or now - kept[-1][0] >= lookahead / RISE_SAMPLES:
        kept.append((now, sample.value))
    history.rates[key] = kept
    if not lookahead or len(seen) < 3:
        return sample
    mean_t = sum(t for t, _ in seen) / len(seen)
    mean_v = sum(v for _, v in seen) / len(seen)
    spread = sum((t - mean_t) ** 2 for t, _ in seen)
    slope = sum((t - mean_t) * (v - mean_v) for t, v in seen) / spread if spread else 0.0
    if slope <= 0:
        return sample
    return Sample(sample.type, sample.target, sample.value + slope * lookahead, sample.name)


def _panic(samples: Sequence[Sample], current: int, spec: Scaling, history: History,
           now: float) -> bool:
    """A burst: demand, averaged over the last `panic.windowSeconds` as Knative does,
    beyond THRESHOLD x what the current replicas are sized for. One outlying sample in a
    longer window is averaged away; a burst that lasts is not."""
    if not spec.panic.enabled:
        return False
    window = spec.panic.window_seconds
    burst = False
    for sample in samples:
        if sample.type in RATIO:  # a level, not demand to compare with capacity
            continue
        key = sample.name or sample.type
        seen = [(t, v) for t, v in history.burst.get(key, []) if t > now - window]
        seen.append((now, sample.value or 0.0))
        history.burst[key] = seen
        average = sum(v for _, v in seen) / len(seen)
        if average >= spec.panic.threshold * max(current, 1) * sample.target:
            burst = True
    if burst:
        history.panic_until = now + PANIC_HOLD_SECONDS
    return burst or now < history.panic_until


def _idle(wanted: int, demand: float, current: int, spec: Scaling, history: History,
          now: float) -> int:
    """Scale to zero only after `scaleToZeroAfterSeconds` with no demand at all; from zero,
    any demand asks for at least one replica."""
    if demand > 0:
        history.idle_since = None
        return max(wanted, 1)
    if history.idle_since is None:
        history.idle_since = now
    if spec.min_replicas == 0 and spec.scale_to_zero_after_seconds is not None and \
            now - history.idle_since >= spec.scale_to_zero_after_seconds:
        return 0
    return max(wanted, 1) if current > 0 else 0


def _stabilize(wanted: int, current: int, spec: Scaling, history: History, now: float,
               panic: bool, why: str, backlog: int = 0) -> tuple[int, str]:
    """WANTED after the windows and rate policies. Scaling down keeps the highest lasting
    recommendation of its window plus the BACKLOG (replicas) still to drain now."""
    if wanted > current:
        if panic:
            return wanted, f"panic: {why}"
        up = [r for t, r, _ in history.recommendations
              if t >= now - spec.scale_up.stabilization_seconds]
        target = max(current, min(up or [wanted]))
        if spec.scale_up.select_policy == "Disabled":
            return current, "scale-up disabled"
        limit = _limit(current, spec.scale_up, history, now, up=True)
        if target > limit:
            return limit, f"{why}; rate-limited to {limit}"
        return target, why
    if wanted < current:
        if panic:
            return current, f"panic mode holds {current}"
        since = now - spec.scale_down.stabilization_seconds
        down = [r for t, _, r in history.recommendations if t >= since]
        if history.first_seen is not None and history.first_seen[0] > since:
            down.append(history.first_seen[1])
        target = min(current, max(wanted, max(down or [wanted]) + backlog))
        if spec.scale_down.select_policy == "Disabled":
            return current, "scale-down disabled"
        limit = _limit(current, spec.scale_down, history, now, up=False)
        if target < limit:
            return limit, f"{why}; rate-limited to {limit}"
        if target == current:
            return current, (f"{why}; scale-down window of "
                             f"{spec.scale_down.stabilization_seconds}s holds {current}")
        return target, why
    return current, why


def _limit(current: int, rules: ScalingRules, history: History, now: float, up: bool) -> int:
    """The rate policies' bound, HPA-style: relative to the replica count at the start of
    each policy's period."""
    policies: list[tuple[str, int, int]] = [
        (p.type, p.value, p.period_seconds) for p in rules.policies] or \
        list(DEFAULT_UP if up else DEFAULT_DOWN)
    bounds = []
    for kind, value, period in policies:
        base = _replicas_at(history, now - period, current)
        if up:
            bounds.append(base + value if kind == "Replicas"
                          else math.ceil(base * (1 + value / 100)))
        else:
            bounds.append(base - value if kind == "Replicas"
                          else math.floor(base * (1 - value / 100)))
    pick = max if (rules.select_policy == "Max") == up else min
    return max(0, int(pick(bounds)))


def _replicas_at(history: History, when: float, current: int) -> int:
    """The replica count at WHEN, from the recorded changes."""
    count = current
    for time, before, _after in reversed(history.changes):
        if time <= when:
            break
        count = before
    return count

