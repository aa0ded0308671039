"""A tenant's PromQL is bounded in cost before the operator sends it to a shared Prometheus
(TENANCY.md rule 5): how far back it reads and how many subquery steps it evaluates; a
query past the bounds is a condition on its own endpoint, and Prometheus is handed the
operator's deadline with every query."""

from __future__ import annotations

import urllib.parse
from typing import ClassVar

import pytest

from goodput_operator.api.inferenceendpoint import MetricTarget
from goodput_operator.api.views import endpoint_view
from goodput_operator.autoscaling import prometheus, promql
from goodput_operator.decide import decide_endpoints, trial
from goodput_operator.decide.creates import WriteBudget
from tests.unit.local_http import Handler, serving
from tests.unit.test_decide_endpoint import endpoint
from tests.unit.world import world

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("query", [
    "sum(vllm:num_requests_waiting)",
    "sum(rate(vllm:request_success_total[1m]))",
    "avg_over_time(queue_depth[1h])",                       # exactly the bound
    "sum(rate(x[30m])) / sum(rate(x[30m] offset 0s))",      # an hour added up
    "max_over_time(rate(x[5m])[30m:1m])",                   # 30 steps, 35 m back
    "sum(rate(x[300]))",                                    # seconds as a number
    'sum(x{path="/a[10y]", note="offset 1y"})',             # inside strings: not PromQL
    "sum(x)  # avg_over_time(x[52w]) once, not now",        # a comment
    "sum(x{le=`[9999d]`})",                                 # a raw string
])
def test_queries_within_the_bounds_are_sent(query: str) -> None:
    promql.check(query)
    assert MetricTarget.model_validate({"type": "PromQL", "target": 1, "query": query})


@pytest.mark.parametrize(("query", "why"), [
    ("avg_over_time(queue_depth[1h1s])", "3601 s back"),
    ("count_over_time(up[10y])", "s back"),
    ("sum(rate(x[40m])) + sum(rate(y[40m]))", "4800 s back"),     # added up
    ("max_over_time(rate(x[50m])[50m:])", "6000 s back"),         # nested adds up
    ("sum(x offset 2h)", "7200 s back"),
    ("sum(x offset -2h)", "7200 s back"),                         # a negative offset
    ("max_over_time(x[1h:500ms])", "7200 steps"),
    ("max_over_time(max_over_time(x[1m:1s])[30m:1s])", "108000 steps"),
    ("max_over_time(x[5m:0s])", "no step"),
    ("rate(x[5m+1h])", "not a duration"),                         # expressions: refused
    ("rate(x[$__range])", "not a duration"),
    ("rate(x[5m)", "without its"),
    ('rate(x["unclosed[1m])', "without its|not a duration"),
])
def test_queries_past_the_bounds_are_refused_naming_the_bound(query: str, why: str) -> None:
    with pytest.raises(promql.PromQLTooCostly, match=why):
        promql.check(query)


def test_the_longest_queries_the_schema_admits_are_read_to_the_end() -> None:
    """4096 characters (the schema's bound) of ranges, of escapes inside one string, and of
    brackets that never close: each is read once, to the right verdict."""
    many = " + ".join(["rate(x[1s])"] * 292)
    assert len(many) <= 4096
    promql.check(many)  # 292 s back in all
    escaped = 'sum(x{a="' + '\\"' * 1360 + '"})'
    assert len(escaped) <= 4096
    promql.check(escaped)
    with pytest.raises(promql.PromQLTooCostly, match="without its"):
        promql.check("x" + "[" * 4095)


def test_a_costly_query_leaves_its_endpoint_not_ready_and_no_other() -> None:
    costly = endpoint("costly", scaling={"minReplicas": 1, "maxReplicas": 2, "metrics": [
        {"type": "PromQL", "target": 5, "query": "sum(count_over_time(up[30d]))"}]})
    fine = endpoint("fine", replicas=1)
    view = endpoint_view(costly)
    assert view.spec is None
    assert "scaling.metrics.0.query" in view.invalid and "s back" in view.invalid
    snapshot = world(None, endpoints=[costly, fine])
    with trial(snapshot):
        decisions = {d.key[1]: d for d in decide_endpoints(snapshot, [], WriteBudget(256))}
    [ready] = [c for c in decisions["costly"].desired["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "allows 3600 s" in ready["message"]
    assert not decisions["costly"].create
    assert len(decisions["fine"].create) == 2  # the other endpoint is decided as ever


class Recording(Handler):
    asked: ClassVar[list[dict[str, list[str]]]] = []

    def do_GET(self) -> None:
        self.asked.append(urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query))
        self.answer(200, {"status": "success",
                          "data": {"resultType": "scalar", "result": [9e9, "7"]}})


def test_prometheus_is_told_the_operators_deadline_with_every_query() -> None:
    Recording.asked = []
    with serving(Recording) as url:
        assert prometheus.instant(url, "sum(x)", timeout=2.5, now=9e9) == 7.0
    assert Recording.asked == [{"query": ["sum(x)"], "timeout": ["2.5"]}]
