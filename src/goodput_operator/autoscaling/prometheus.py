"""The Prometheus HTTP API at the autoscaler's edge: one instant query per metric.

Default queries read vLLM's metric names, restricted to the endpoint by the `namespace`
and `endpoint` labels (relabel the pod label goodput.dev/inferenceendpoint to `endpoint`
in your scrape config); a PromQL metric brings its own query. A value is *stale* when its
sample is older than `stale_after` seconds, and then counts as missing.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from goodput_operator.api.inferenceendpoint import MetricTarget

DEFAULT_QUERIES = {
    "QueueDepth": 'sum(vllm:num_requests_waiting{{namespace="{namespace}",endpoint="{name}"}})',
    "Concurrency": 'sum(vllm:num_requests_running{{namespace="{namespace}",endpoint="{name}"}})',
    "TTFTp95": ('histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds'
                '_bucket{{namespace="{namespace}",endpoint="{name}"}}[1m])))'),
    "TokensPerSecond": ('sum(rate(vllm:generation_tokens_total{{namespace="{namespace}",'
                        'endpoint="{name}"}}[1m]))'),
}


class PrometheusError(RuntimeError):
    pass


def query_for(metric: MetricTarget, namespace: str, name: str) -> str:
    if metric.type == "PromQL":
        return str(metric.query)
    return DEFAULT_QUERIES[metric.type].format(namespace=namespace, name=name)


def instant(url: str, promql: str, timeout: float = 5.0, stale_after: float = 60.0,
            now: float | None = None) -> float | None:
    """The query's single value now; None when it returns nothing, NaN, or a stale
    sample. Raises PrometheusError when Prometheus cannot be reached or refuses."""
    address = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    try:
        with urllib.request.urlopen(address, timeout=timeout) as response:
            body = json.loads(response.read())
    except (OSError, ValueError) as err:
        raise PrometheusError(f"Prometheus at {url} unreachable: {err}") from None
    if body.get("status") != "success":
        raise PrometheusError(f"Prometheus refused {promql!r}: {body.get('error')}")
    data = body["data"]
    if data["resultType"] == "scalar":
        stamp, raw = data["result"]
    elif data["resultType"] == "vector" and data["result"]:
        if len(data["result"]) > 1:
            raise PrometheusError(f"{promql!r} returned {len(data['result'])} series; "
                                  "it must return one number")
        stamp, raw = data["result"][0]["value"]
    else:
        return None
    value = float(raw)
    current = time.time() if now is None else now
    if math.isnan(value) or current - float(stamp) > stale_after:
        return None
    return value
