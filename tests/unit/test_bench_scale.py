"""The scale benchmark's arithmetic: quantiles from a Prometheus histogram, and the node
failure trials' summary."""

from __future__ import annotations

import math

import pytest
from bench.scale import api_calls, minus, pass_buckets, quantile

INF = math.inf


@pytest.mark.parametrize(("case", "buckets", "q", "expected"), [
    ("no observations", {0.1: 0, 1.0: 0, INF: 0}, 0.99, 0.0),
    ("all in the first bucket: interpolated from 0", {0.1: 10, 1.0: 10, INF: 10}, 0.5, 0.05),
    ("the median in the second bucket", {0.1: 2, 1.0: 10, INF: 10}, 0.5, 0.1 + 0.9 * 3 / 8),
    ("beyond the last finite bound: that bound", {0.1: 0, 1.0: 5, INF: 10}, 0.99, 1.0),
])
def test_quantile_as_prometheus_histogram_quantile(case: str, buckets: dict[float, float],
                                                   q: float, expected: float) -> None:
    assert quantile(buckets, q) == pytest.approx(expected), case


def test_buckets_are_read_from_exposition_samples_and_subtracted() -> None:
    before = pass_buckets({'goodput_reconcile_pass_seconds_bucket{le="0.5"}': 3.0,
                           'goodput_reconcile_pass_seconds_bucket{le="+Inf"}': 4.0,
                           "goodput_reconcile_pass_seconds_count": 4.0})
    after = {0.5: 10.0, INF: 12.0}
    assert before == {0.5: 3.0, INF: 4.0}
    assert minus(after, before) == {0.5: 7.0, INF: 8.0}


def test_buckets_of_a_labelled_histogram_are_summed_over_its_labels() -> None:
    samples = {'goodput_reconcile_seconds_bucket{kind="TrainingJob",le="1.0"}': 2.0,
               'goodput_reconcile_seconds_bucket{kind="InferenceEndpoint",le="1.0"}': 3.0,
               'goodput_reconcile_pass_seconds_bucket{le="1.0"}': 99.0}
    assert pass_buckets(samples, "goodput_reconcile_seconds") == {1.0: 5.0}


def test_api_calls_between_two_scrapes_rank_by_the_api_servers_seconds() -> None:
    def scrape(pods: tuple[float, float], status: tuple[float, float]) -> dict[str, float]:
        name = "goodput_api_request_seconds"
        return {f'{name}_count{{method="POST",resource="pods"}}': pods[0],
                f'{name}_sum{{method="POST",resource="pods"}}': pods[1],
                f'{name}_count{{method="PATCH",resource="trainingjobs/status"}}': status[0],
                f'{name}_sum{{method="PATCH",resource="trainingjobs/status"}}': status[1],
                f'{name}_bucket{{method="POST",resource="pods",le="1.0"}}': 1.0}

    calls = api_calls(scrape((110, 30.0), (7, 0.5)), scrape((10, 10.0), (7, 0.5)))
    assert calls == {"POST pods": {"count": 100, "mean_ms": 200.0, "seconds": 20.0}}
    both = api_calls(scrape((110, 30.0), (9, 41.0)), {})
    assert list(both) == ["PATCH trainingjobs/status", "POST pods"]
    assert both["PATCH trainingjobs/status"]["mean_ms"] == pytest.approx(4555.6)


def test_failure_trials_fail_one_job_each_and_summarize_median_and_worst(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.scale as scale

    failed: list[str] = []
    figures = iter([(0.2, 0.3), (0.4, 5.0), (0.3, 0.5)])

    def node_failure(box: object, job: str) -> dict[str, float]:
        failed.append(job)
        detection, total = next(figures)
        return {"detection_s": detection, "placement_s": round(total - detection, 2),
                "total_s": total, "recorded_s": detection, "kubectl_s": 1.0}

    monkeypatch.setattr(scale, "node_failure", node_failure)
    ready = iter([10, 20, 30])
    found = scale.failures(None, range(2, 5), lambda: None, lambda: next(ready))  # type: ignore[arg-type]
    assert failed == ["tj-0002", "tj-0003", "tj-0004"]
    assert [t["endpoints_ready"] for t in found["trials"]] == [10, 20, 30]
    assert (found["total_s_median"], found["total_s_max"]) == (0.5, 5.0)
    assert (found["detection_s_median"], found["detection_s_max"]) == (0.3, 0.4)
    assert (found["placement_s_median"], found["placement_s_max"]) == (0.2, 4.6)


@pytest.mark.parametrize(("incident", "expected"), [
    ({"detectionSeconds": 0.4, "replacementSeconds": 0}, 0.4),
    ({"detectionSeconds": 0.4, "replacementSeconds": 0.25}, 0.65),
    ({"detectionSeconds": 0.4}, math.nan),
    ({}, math.nan),
])
def test_an_incident_s_recorded_span_counts_a_zero_replacement(
        incident: dict[str, float], expected: float) -> None:
    from bench.scale import recorded

    assert recorded(incident) == pytest.approx(expected, nan_ok=True)


def test_endpoints_spread_over_namespaces_in_turn_and_stay_in_one_by_default() -> None:
    from bench.scale import NAMESPACE, endpoint

    assert {endpoint(i, 3)["metadata"]["namespace"] for i in range(5)} == {NAMESPACE}
    assert [endpoint(i, 3, namespaces=2)["metadata"]["namespace"] for i in range(4)] == [
        f"{NAMESPACE}-0", f"{NAMESPACE}-1", f"{NAMESPACE}-0", f"{NAMESPACE}-1"]
