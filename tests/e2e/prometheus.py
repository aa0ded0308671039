"""A tiny exporter of vLLM-named series the tests drive, for a real Prometheus
(goodput_operator.sandbox.prometheus) to scrape."""

from __future__ import annotations

import threading
import time

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

from goodput_operator.sandbox.prometheus import serve_metrics


class Exporter:
    """vLLM-named series per endpoint, served to Prometheus; tests set the gauges and the
    rate at which the finished-requests counter grows.

    Served in the classic text format, as vLLM serves them: prometheus_client's
    OpenMetrics output rewrites the `:` in vLLM's names to `_`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # role: a disaggregated endpoint's pool ("" for one role: Prometheus drops the label)
        self.waiting = Gauge("vllm:num_requests_waiting", "queued requests",
                             ["namespace", "endpoint", "role"], registry=self.registry)
        self.kv_cache = Gauge("vllm:kv_cache_usage_perc", "KV-cache use, 0-1",
                              ["namespace", "endpoint", "role", "pod"],
                              registry=self.registry)
        self.in_flight = Gauge("vllm:num_requests_running", "requests being served",
                               ["namespace", "endpoint"], registry=self.registry)
        self.finished = Counter("vllm:request_success", "finished requests",
                                ["namespace", "endpoint", "pod"], registry=self.registry)
        self.sglang_cache = Gauge("sglang:token_usage", "KV-cache use (SGLang's name)",
                                  ["namespace", "endpoint", "pod"], registry=self.registry)
        self.rates: dict[tuple[str, str, str], float] = {}
        threading.Thread(target=self._finish, daemon=True).start()
        self.port = serve_metrics(lambda: generate_latest(self.registry), CONTENT_TYPE_LATEST)

    def queue(self, namespace: str, endpoint: str, depth: float, role: str = "") -> None:
        self.waiting.labels(namespace, endpoint, role).set(depth)

    def cache_use(self, namespace: str, endpoint: str, role: str, *per_server: float) -> None:
        """KV-cache use of each of ROLE's servers, under vLLM's metric name."""
        for index, use in enumerate(per_server):
            self.kv_cache.labels(namespace, endpoint, role, f"server-{index}").set(use)

    def serving(self, namespace: str, endpoint: str, running: float,
                finished_per_second: float, pod: str = "server-0") -> None:
        """RUNNING requests in flight, and FINISHED_PER_SECOND added to POD's
        vllm:request_success_total from now on (a new POD: a new series)."""
        self.in_flight.labels(namespace, endpoint).set(running)
        self.rates[(namespace, endpoint, pod)] = finished_per_second

    def sglang_cache_use(self, namespace: str, endpoint: str, *per_server: float) -> None:
        """KV-cache use of each of the endpoint's servers, under SGLang's metric name."""
        for index, use in enumerate(per_server):
            self.sglang_cache.labels(namespace, endpoint, f"server-{index}").set(use)

    def _finish(self) -> None:
        last = time.monotonic()
        while True:
            time.sleep(0.1)
            now = time.monotonic()
            for key, rate in list(self.rates.items()):
                self.finished.labels(*key).inc(rate * (now - last))
            last = now
