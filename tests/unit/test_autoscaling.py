"""The autoscaler, decision by decision (table tests with a fake clock)."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator.api.inferenceendpoint import Scaling
from goodput_operator.autoscaling.algorithm import RISE_SAMPLES, History, Sample, recommend


def scaling(**spec: Any) -> Scaling:
    return Scaling.model_validate({"maxReplicas": 20, "metrics": [{"type": "QueueDepth",
                                                                   "target": 8}], **spec})


def queue(total: float | None) -> list[Sample]:
    return [Sample("QueueDepth", 8, total)]


@pytest.mark.parametrize(
    ("total", "current", "desired"),
    [
        (16, 2, 2),      # exactly on target
        (17, 2, 2),      # ratio 1.06: within the 10% tolerance
        (18, 2, 3),      # ratio 1.125: beyond it
        (80, 2, 6),      # HPA default rate limit: max(+4, +100%) per 15 s -> 6, not 10
        (40, 4, 5),
    ],
)
def test_scale_up_follows_the_ratio_within_tolerance_and_rate(total: float, current: int,
                                                              desired: int) -> None:
    decision = recommend(queue(total), current, scaling(), History(), now=1000)
    assert decision.desired == desired


def test_scale_down_waits_for_the_window_and_takes_its_highest_recommendation() -> None:
    spec, history = scaling(scaleDown={"stabilizationSeconds": 60}), History()
    assert recommend(queue(40), 5, spec, history, now=0).desired == 5
    assert recommend(queue(16), 5, spec, history, now=10).desired == 5      # within window
    assert recommend(queue(24), 5, spec, history, now=40).desired == 5
    assert recommend(queue(16), 5, spec, history, now=61).desired == 3      # 24/8 still in it
    assert recommend(queue(16), 3, spec, history, now=101).desired == 2


def test_a_wandering_metric_inside_the_tolerance_never_scales() -> None:
    spec, history, current = scaling(scaleDown={"stabilizationSeconds": 0}), History(), 4
    for step, total in enumerate([32, 34, 30, 33.5, 29.5, 31, 34.9, 29]):
        current = recommend(queue(total), current, spec, history, now=step * 15).desired
        assert current == 4


def test_several_metrics_the_largest_recommendation_wins() -> None:
    samples = [Sample("QueueDepth", 8, 16), Sample("TTFTp95", 0.5, 1.5)]
    decision = recommend(samples, 2, scaling(), History(), now=0)
    assert decision.desired == 6 and "TTFTp95" in decision.reason


def test_missing_metrics_hold_the_size_and_never_scale_to_zero() -> None:
    spec = scaling(minReplicas=0, scaleToZeroAfterSeconds=60)
    decision = recommend(queue(None), 3, spec, History(), now=0)
    assert decision.desired == 3 and decision.unavailable


def test_scale_to_zero_after_an_idle_period_and_back_on_demand() -> None:
    spec = scaling(minReplicas=0, scaleToZeroAfterSeconds=60,
                   scaleDown={"stabilizationSeconds": 0})
    history = History()
    assert recommend(queue(0), 1, spec, history, now=0).desired == 1
    assert recommend(queue(0), 1, spec, history, now=59).desired == 1
    assert recommend(queue(0), 1, spec, history, now=60).desired == 0
    assert recommend(queue(0), 0, spec, history, now=75).desired == 0
    assert recommend(queue(1), 0, spec, history, now=90).desired == 1


def test_without_opt_in_an_idle_endpoint_keeps_min_replicas() -> None:
    spec = scaling(scaleDown={"stabilizationSeconds": 0})
    assert recommend(queue(0), 3, spec, History(), now=0).desired == 1


def test_panic_skips_the_window_and_the_rate_limit_and_holds_scale_down() -> None:
    spec = scaling(panic={"enabled": True, "threshold": 2},
                   scaleUp={"stabilizationSeconds": 30}, scaleDown={"stabilizationSeconds": 0})
    history = History()
    burst = recommend(queue(160), 2, spec, history, now=0)
    assert burst.panic and burst.desired == 20 and burst.reason.startswith("panic")
    calm = recommend(queue(8), 20, spec, history, now=30)
    assert calm.desired == 20 and "panic mode holds" in calm.reason
    assert recommend(queue(8), 20, spec, history, now=61).desired < 20


@pytest.mark.parametrize(("window", "panics"), [
    (1, True),     # the spike alone is the window: 40 >= 2 x 1 replica x 8
    (6, False),    # averaged with five calm seconds: 40 / 6 < 16
])
def test_panic_judges_the_average_over_its_window(window: int, panics: bool) -> None:
    spec = scaling(panic={"enabled": True, "threshold": 2, "windowSeconds": window},
                   scaleUp={"stabilizationSeconds": 30})
    history = History()
    for second in range(5):
        recommend(queue(0), 1, spec, history, now=second)
    assert recommend(queue(40), 1, spec, history, now=5).panic is panics


def test_capacity_and_max_replicas_limit_with_a_reason() -> None:
    decision = recommend(queue(64), 4, scaling(), History(), now=0, capacity=6)
    assert decision.desired == 6 and "free domains can host only 6" in (decision.limited or "")
    capped = recommend(queue(400), 18, scaling(), History(), now=0)
    assert capped.desired == 20 and "maxReplicas is 20" in (capped.limited or "")


def test_rate_policies_count_from_the_start_of_their_period() -> None:
    spec = scaling(scaleUp={"stabilizationSeconds": 0, "policies": [
        {"type": "Replicas", "value": 2, "periodSeconds": 60}]})
    history = History()
    assert recommend(queue(80), 2, spec, history, now=0).desired == 4
    assert recommend(queue(80), 4, spec, history, now=30).desired == 4   # +2 per 60 s used
    assert recommend(queue(80), 4, spec, history, now=61).desired == 6


def test_lookahead_judges_a_growing_queue_where_it_is_heading() -> None:
    spec = scaling(lookaheadSeconds=30, scaleDown={"stabilizationSeconds": 0})
    history = History()
    assert recommend(queue(16), 2, spec, history, now=0).desired == 2
    growing = recommend(queue(24), 2, spec, history, now=15)      # +8/15 s -> 40 in 30 s
    assert growing.desired == 5
    draining = recommend(queue(8), 5, spec, history, now=30)       # -16/15 s -> 0 in 30 s
    assert draining.desired == 1 and draining.reason.startswith("QueueDepth 0 ")  # no window
    first = recommend(queue(24), 5, spec, History(), now=0)
    assert first.desired == 3                                     # no trend yet: as it is


def arrivals(rate: float, waiting: float | None = None) -> list[Sample]:
    """A RequestRate sample (one replica serves 4 requests/s), and a queue if WAITING."""
    queued = [] if waiting is None else queue(waiting)
    return [Sample("RequestRate", 4, rate), *queued]


def by_rate(**spec: Any) -> Scaling:
    return scaling(metrics=[{"type": "RequestRate", "target": 4},
                            {"type": "QueueDepth", "target": 8}], **spec)


def test_lookahead_sizes_a_rising_arrival_rate_for_when_new_replicas_serve() -> None:
    """Replicas asked for now serve after their start-up: on a rise, the rate is judged
    where its slope over the last lookaheadSeconds takes it by then. A falling rate is not
    projected down (a released replica stops costing at once), and two samples are no
    trend: one noisy step is not a rise."""
    spec, history = by_rate(lookaheadSeconds=60, scaleDown={"stabilizationSeconds": 0}), \
        History()
    assert recommend(arrivals(20, 0), 5, spec, history, now=0).desired == 5
    assert recommend(arrivals(24, 0), 5, spec, history, now=15).desired == 6  # as it is
    rising = recommend(arrivals(28, 0), 6, spec, history, now=30)  # +4/15 s -> 44 in 60 s
    assert rising.desired == 11 and rising.reason.startswith("RequestRate 44 ")
    falling = recommend(arrivals(12, 0), 11, by_rate(
        lookaheadSeconds=60, scaleDown={"stabilizationSeconds": 0}), History(), now=0)
    assert falling.desired == 3
    history_down = History()
    spec_down = by_rate(lookaheadSeconds=60, scaleDown={"stabilizationSeconds": 0})
    for now, rate in ((0, 40), (15, 32), (30, 24)):
        found = recommend(arrivals(rate, 0), 10, spec_down, history_down, now=now)
    assert found.desired == 6  # 24 / 4: where it is, not below


def test_a_rises_projection_is_not_held_by_the_scale_down_window() -> None:
    """Like a backlog, the lead a rise asks for lasts only while it rises: once the rate
    levels off, the 300 s window holds the rate as it was seen, not the projection."""
    spec, history = by_rate(lookaheadSeconds=60), History()
    for now, rate, current in ((0, 20, 5), (15, 24, 5), (30, 28, 6)):
        found = recommend(arrivals(rate, 0), current, spec, history, now=now)
    assert found.desired == 11  # 28 projected to 44
    for now in (45, 60, 75, 90, 105):
        found = recommend(arrivals(28, 0), 11, spec, history, now=now)
    assert found.desired == 7  # level at 28: 7 replicas, the window's highest as seen


def test_a_long_lookahead_at_a_short_interval_keeps_a_bounded_rate_history() -> None:
    """What one endpoint may make the operator remember is bounded (TENANCY.md): the rise
    is fitted to at most RISE_SAMPLES values across the window, and still seen."""
    spec, history = by_rate(lookaheadSeconds=3600, intervalSeconds=1), History()
    for now in range(3600):
        found = recommend(arrivals(20 + now / 100, 0), 14, spec, history, now=now)
    assert len(history.rates["RequestRate"]) <= RISE_SAMPLES + 1
    # 56 req/s (14 replicas as seen) rising 0.6/min, judged an hour ahead: 92 req/s, 23
    # replicas, held at maxReplicas
    assert found.desired == 20 and found.limited == "23 wanted, scaling.maxReplicas is 20"


def test_without_lookahead_the_rate_is_judged_as_it_is() -> None:
    history = History()
    for now, rate in ((0, 20), (15, 24), (30, 28)):
        found = recommend(arrivals(rate, 0), 5, by_rate(scaleDown={"stabilizationSeconds": 0}),
                          history, now=now)
    assert found.desired == 7  # 28 / 4


@pytest.mark.parametrize(
    ("rate", "waiting", "current", "desired"),
    [
        (40, None, 10, 10),    # arrivals alone: 40 / 4 served per replica
        (60, None, 10, 15),
        (40, 0, 10, 10),       # an empty queue adds nothing
        (40, 40, 10, 15),      # 10 keep up, 40 queued / 8 per replica drain it: 5 more
        (4, 80, 10, 11),       # a backlog but few arrivals: 1 + 10
        (0, 0, 3, 1),          # no demand at all: the floor of one
    ],
)
def test_the_arrival_rate_sizes_and_the_backlog_adds_what_drains_it(
        rate: float, waiting: float | None, current: int, desired: int) -> None:
    spec = by_rate(scaleDown={"stabilizationSeconds": 0},
                   scaleUp={"stabilizationSeconds": 0,
                            "policies": [{"type": "Percent", "value": 1000,
                                         "periodSeconds": 15}]})
    decision = recommend(arrivals(rate, waiting), current, spec, History(), now=0)
    assert decision.desired == desired
    assert ("backlog" in decision.reason) == bool(waiting and desired > current)


def test_the_backlogs_peak_is_released_once_drained_but_the_arrivals_need_is_held() -> None:
    spec, history = by_rate(), History()  # scale-down window 300 s
    burst = recommend(arrivals(40, 80), 10, spec, history, now=0)
    assert burst.desired == 20                                      # 10 + 80 / 8
    drained = recommend(arrivals(40, 0), 20, spec, history, now=15)
    assert drained.desired == 10                                    # at once, not in 300 s
    quieter = recommend(arrivals(20, 0), 10, spec, history, now=30)
    assert quieter.desired == 10 and "window" in quieter.reason     # arrivals' need held
    assert recommend(arrivals(20, 0), 10, spec, history, now=316).desired == 5


def test_on_the_queue_alone_the_window_keeps_the_backlogs_peak() -> None:
    spec, history = scaling(), History()  # QueueDepth only: as the HPA does
    assert recommend(queue(160), 10, spec, history, now=0).desired == 20
    assert recommend(queue(0), 20, spec, history, now=15).desired == 20


def test_kv_cache_use_scales_by_its_ratio_and_the_largest_need_wins() -> None:
    spec = scaling(scaleUp={"stabilizationSeconds": 0, "policies": [
        {"type": "Percent", "value": 1000, "periodSeconds": 15}]})
    cache = [Sample("KVCacheUtilization", 0.8, 0.95), Sample("QueueDepth", 8, 16)]
    decision = recommend(cache, 4, spec, History(), now=0)
    assert decision.desired == 5 and decision.reason.startswith("KVCacheUtilization")
    busy = recommend([*cache[:1], Sample("QueueDepth", 8, 64)], 4, spec, History(), now=0)
    assert busy.desired == 8 and busy.reason.startswith("QueueDepth")


def test_panic_judges_demand_never_a_level_like_cache_use() -> None:
    spec = scaling(panic={"enabled": True, "threshold": 2, "windowSeconds": 1})
    full = recommend([Sample("KVCacheUtilization", 0.4, 0.95)], 1, spec, History(), now=0)
    assert not full.panic and full.desired == 3                 # ceil(1 x 0.95 / 0.4)


def test_a_fresh_history_holds_the_replicas_it_finds_for_one_scale_down_window() -> None:
    """A restarted operator (or a minReplicas lowered after a quiet spell) remembers no
    demand: like the HPA, the first window holds the replicas found, then lets them go."""
    spec, history = scaling(scaleDown={"stabilizationSeconds": 300}), History()
    assert recommend(queue(16), 8, spec, history, now=1000).desired == 8   # 2 wanted
    assert recommend(queue(16), 8, spec, history, now=1299).desired == 8   # inside the window
    assert recommend(queue(16), 8, spec, history, now=1301).desired == 2   # it has passed
    zero = scaling(scaleDown={"stabilizationSeconds": 0})
    assert recommend(queue(16), 8, zero, History(), now=1000).desired == 2  # no window
