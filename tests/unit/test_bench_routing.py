"""bench.routing's figures from what one arm saw: success against the mark, each region's
share and latency, and the times to shift away and to come back."""

from __future__ import annotations

import pytest
from bench.routing import FAILING, Sent, Timeline, summary

pytestmark = pytest.mark.unit


def test_an_arms_summary_counts_every_request_and_times_the_return() -> None:
    sent = [Sent(at=t / 10, latency=0.010, ok=True, region=FAILING) for t in range(0, 40)]
    sent += [Sent(at=t / 10, latency=0.030, ok=True, region="region-b") for t in range(0, 100)]
    sent += [Sent(at=4.05, latency=1.0, ok=False)]  # lost while the region failed
    sent += [Sent(at=t / 10, latency=0.012, ok=True, region=FAILING) for t in range(72, 100)]
    timeline = Timeline(failed_at=4.0, healed_at=7.0, down_in_proxy=0.9, weight_zero=0.4,
                        full_share=6.1)
    found = summary(sent, timeline)
    assert (found["sent"], found["succeeded"]) == (169, 168)
    assert found["success_ratio"] == round(168 / 169, 6) and not found["meets_mark"]
    assert found["errors_after_failure"] == 1
    assert found["regions"][FAILING]["answered"] == 68
    assert found["regions"]["region-b"]["p50_ms"] == 30.0
    assert found["regions"]["region-c"] == {"answered": 0, "share": 0.0, "p50_ms": None,
                                            "p99_ms": None}
    assert found["first_answer_back_s"] == 0.2  # 7.2 s, the first answer after the heal
    assert (found["down_in_proxy_s"], found["weight_zero_s"], found["full_share_back_s"]) \
        == (0.9, 0.4, 6.1)
