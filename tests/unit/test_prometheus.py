"""The autoscaler's edge: which Prometheus an endpoint may name, and what an answer may be."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import ClassVar

import pytest

from goodput_operator.api.inferenceendpoint import MetricTarget
from goodput_operator.autoscaling import prometheus
from tests.unit.local_http import Handler, serving

pytestmark = pytest.mark.unit
OURS = ["http://prometheus.monitoring.svc:9090", "https://thanos.example.com/tenant-a",
        "http://127.0.0.1"]


@pytest.mark.parametrize(("url", "ok"), [
    ("http://prometheus.monitoring.svc:9090", True),
    ("http://prometheus.monitoring.svc:9090/", True),
    ("https://thanos.example.com/tenant-a/api", True),
    ("http://127.0.0.1:45123", True),                          # no port named: any port
    ("http://prometheus.monitoring.svc:9091", False),          # another port
    ("http://prometheus.monitoring.svc", False),               # port 80 is not 9090
    ("https://thanos.example.com/tenant-b", False),            # another path
    ("https://thanos.example.com/tenant-ab", False),           # a sibling sharing a prefix
    ("http://thanos.example.com/tenant-a", False),             # another scheme
    ("http://169.254.169.254/latest/meta-data", False),        # cloud metadata
    ("https://kubernetes.default.svc", False),                 # the API server
    ("http://127.0.0.1@169.254.169.254", False),               # userinfo tricks
    ("http://127.0.0.1.evil.example", False),
])
def test_an_endpoint_may_name_only_the_prometheus_the_operator_allows(url: str,
                                                                      ok: bool) -> None:
    assert prometheus.allowed(url, OURS) is ok


class Answers(Handler):
    body: ClassVar[bytes] = b""

    def do_GET(self) -> None:
        self.answer(200, self.body)


@pytest.fixture
def server() -> Iterator[str]:
    with serving(Answers) as url:
        yield url


@pytest.mark.parametrize(("body", "error"), [
    (b'{"status": "success", "data": {"resultType": "vector", "result": []}, "pad": "'
     + b"x" * (2 << 20) + b'"}', "answered with over"),       # a huge answer is not read
    (b"[1, 2, 3]", "not a JSON object"),
    (b'{"status": "success", "data": {"resultType": "vector", "result": [{"v": 1}]}}',
     "not a Prometheus result"),
    (b'{"status": "success", "data": {"resultType": "scalar", "result": ["now", "1"]}}',
     "not a Prometheus result"),
])
def test_an_answer_that_is_not_one_number_is_an_error_never_a_crash(
        server: str, body: bytes, error: str) -> None:
    Answers.body = body
    with pytest.raises(prometheus.PrometheusError, match=error):
        prometheus.instant(server, "up", timeout=5)


@pytest.mark.parametrize(("kind", "vllm", "sglang"), [
    ("QueueDepth", ["vllm:num_requests_waiting"], ["sglang:num_queue_reqs"]),
    ("Concurrency", ["vllm:num_requests_running"], ["sglang:num_running_reqs"]),
    ("TTFTp95", ["vllm:time_to_first_token_seconds_bucket"],
     ["sglang:time_to_first_token_seconds_bucket"]),
    ("TokensPerSecond", ["vllm:generation_tokens_total"], ["sglang:generation_tokens_total"]),
    ("RequestRate", ["vllm:request_success_total", "vllm:num_requests_waiting",
                     "vllm:num_requests_running"],
     ["sglang:num_requests_total", "sglang:num_queue_reqs", "sglang:num_running_reqs"]),
    ("KVCacheUtilization", ["vllm:kv_cache_usage_perc"], ["sglang:token_usage"]),
])
def test_default_queries_read_each_engines_names_for_this_endpoint_only(
        kind: str, vllm: list[str], sglang: list[str]) -> None:
    metric = MetricTarget.model_validate({"type": kind, "target": 0.5})
    for names, expected, other in (("vLLM", vllm, "sglang:"), ("SGLang", sglang, "vllm:")):
        query = prometheus.query_for(metric, "team-a", "chat", names)
        selector = '{namespace="team-a",endpoint="chat"}'
        assert all(f"{name}{selector}" in query for name in expected), query
        prefix = "vllm:" if names == "vLLM" else "sglang:"
        used = re.findall(re.escape(prefix) + r"[a-z_]+(\{[^}]*\})?", query)
        assert used and all(found == selector for found in used), query  # each selected
        assert other not in query, query


class Redirecting(Handler):
    target: ClassVar[str] = ""

    def do_GET(self) -> None:
        if self.path.startswith("/api/v1/query"):
            self.send_response(302)
            self.send_header("Location", f"{self.target}{self.path}")
            self.end_headers()
            return
        self.answer(200, {"status": "success",
                          "data": {"resultType": "scalar", "result": [9e9, "7"]}})


@pytest.mark.parametrize(("target", "allowed_to"), [
    ("http://169.254.169.254/latest", False),           # an allowed Prometheus bounces to
    ("http://127.0.0.1:{port}/ok", True),               # cloud metadata: refused; to itself:
])                                                      # followed
def test_every_redirect_hop_is_checked_against_the_allow_list(target: str,
                                                              allowed_to: bool) -> None:
    with serving(Redirecting) as url:
        port = url.rsplit(":", 1)[1].rstrip("/")
        Redirecting.target = target.format(port=port)
        if allowed_to:
            assert prometheus.instant(url, "up", timeout=5, now=9e9,
                                      allow=["http://127.0.0.1"]) == 7.0
            return
        with pytest.raises(prometheus.PrometheusError, match="which the operator may not"):
            prometheus.instant(url, "up", timeout=5, allow=["http://127.0.0.1"])
