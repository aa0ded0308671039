"""The Prometheus HTTP API at the autoscaler's edge: one instant query per metric.

Default queries read vLLM's metric names (or SGLang's), restricted to the endpoint by the
`namespace` and `endpoint` labels (relabel the pod label goodput.dev/inferenceendpoint to
`endpoint` in your scrape config), and for one role of a disaggregated endpoint by `role`
too (relabel goodput.dev/serving-role to `role`); a PromQL metric brings its own query. A value is
*stale* when its sample is older than `stale_after` seconds, and then counts as missing.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from goodput_operator.api.inferenceendpoint import MetricTarget

_SELECTOR = '{{namespace="{namespace}",endpoint="{name}"{role}}}'


def finishes(counter: str) -> str:
    """Requests finished per second, summed over the servers' COUNTER series, each read
    right from its first minute: rate() over [1m] reads a series younger than the window
    low (a new replica's: 3 of 5 requests/s on a scale-out here), so a live series' rate
    is divided by the part of the window it has samples for (its count against the
    oldest's); a series gone (its server removed) is not, and fades out over the minute
    as its server's share moves to the others."""
    window = f"count_over_time({counter}[1m])"
    live = (f"sum((rate({counter}[1m]) / ({window} / scalar(max({window})))) "
            f"and on(instance) {counter})")
    gone = f"(sum(rate({counter}[1m]) unless on(instance) {counter}) or vector(0))"
    return f"({live} + {gone})"


def _queries(waiting: str, running: str, ttft: str, tokens: str, finished: str,
             kv_cache: str) -> dict[str, str]:
    """The default query of each metric type, from one serving engine's metric names."""
    def of(metric: str) -> str:
        return metric + _SELECTOR

    return {
        "QueueDepth": f"sum({of(waiting)})",
        "Concurrency": f"sum({of(running)})",
        "TTFTp95": f"histogram_quantile(0.95, sum by (le) (rate({of(ttft + '_bucket')}[1m])))",
        "TokensPerSecond": f"sum(rate({of(tokens)}[1m]))",
        # engines count a request when it finishes: arrivals are finishes plus what the
        # waiting and running requests grew by
        "RequestRate": (f"{finishes(of(finished))} + sum(deriv({of(waiting)}[1m])) + "
                        f"sum(deriv({of(running)}[1m]))"),
        "KVCacheUtilization": f"avg({of(kv_cache)})",
    }


DEFAULT_QUERIES = {
    "vLLM": _queries("vllm:num_requests_waiting", "vllm:num_requests_running",
                     "vllm:time_to_first_token_seconds", "vllm:generation_tokens_total",
                     "vllm:request_success_total", "vllm:kv_cache_usage_perc"),
    "SGLang": _queries("sglang:num_queue_reqs", "sglang:num_running_reqs",
                       "sglang:time_to_first_token_seconds", "sglang:generation_tokens_total",
                       "sglang:num_requests_total", "sglang:token_usage"),
}


MAX_ANSWER = 1 << 20  # bytes of one query's answer at most: one number needs far less


class PrometheusError(RuntimeError):
    pass


def allowed(url: str, allow: Sequence[str]) -> bool:
    """URL is one of the ALLOW prefixes: the same scheme and host, the same port when the
    prefix names one, and a path under the prefix's. A tenant's scaling.prometheusUrl may
    name only what the operator's configuration allows (else it could make the operator
    fetch any address it can reach: cloud metadata, the API server, internal services)."""
    target = urllib.parse.urlsplit(url)
    if target.username is not None or target.password is not None:
        return False
    for entry in allow:
        prefix = urllib.parse.urlsplit(entry)
        if (target.scheme, target.hostname) != (prefix.scheme, prefix.hostname):
            continue
        if prefix.port is not None and (target.port or _default_port(target.scheme)) != \
                prefix.port:
            continue
        base = prefix.path.rstrip("/") + "/"
        if (target.path.rstrip("/") + "/").startswith(base):
            return True
    return False


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def query_for(metric: MetricTarget, namespace: str, name: str, names: str = "vLLM",
              role: str = "") -> str:
    """METRIC's PromQL for the endpoint (its ROLE's pods, if given), from the NAMES
    engine's metric names."""
    if metric.type == "PromQL":
        return str(metric.query)
    return DEFAULT_QUERIES[names][metric.type].format(
        namespace=namespace, name=name, role=f',role="{role}"' if role else "")


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only to where the allow-list lets the operator go: a Prometheus
    the admin allowed must not bounce the operator to cloud metadata or the API server."""

    def __init__(self, allow: Sequence[str] | None) -> None:
        self.allow = allow

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                         headers: Any, newurl: str) -> urllib.request.Request | None:
        if self.allow is not None and not allowed(newurl, self.allow):
            raise PrometheusError(f"Prometheus at {req.full_url.split('?')[0]} redirected "
                                  f"to {newurl.split('?')[0]}, which the operator may not "
                                  "query (--prometheus-url, --prometheus-allow)")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def instant(url: str, promql: str, timeout: float = 5.0, stale_after: float = 60.0,
            now: float | None = None, allow: Sequence[str] | None = None) -> float | None:
    """The query's single value now; None when it returns nothing, NaN, or a stale
    sample. Raises PrometheusError when Prometheus cannot be reached or refuses. TIMEOUT
    bounds both the operator's wait and Prometheus's evaluation. ALLOW:
    the prefixes every redirect hop must be under (None: any, for the tests' own use)."""
    # Prometheus's own `timeout`: it stops evaluating when the operator stops waiting,
    # instead of finishing a costly query nobody reads (promql.py bounds the rest)
    params = urllib.parse.urlencode({"query": promql, "timeout": f"{timeout:g}"})
    address = f"{url.rstrip('/')}/api/v1/query?{params}"
    opener = urllib.request.build_opener(_Redirects(allow))
    try:
        with opener.open(address, timeout=timeout) as response:
            raw_body = response.read(MAX_ANSWER + 1)
        if len(raw_body) > MAX_ANSWER:
            raise PrometheusError(f"Prometheus at {url} answered with over {MAX_ANSWER} "
                                  "bytes: not one number")
        body = json.loads(raw_body)
    except (OSError, ValueError) as err:
        raise PrometheusError(f"Prometheus at {url} unreachable: {err}") from None
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error") if isinstance(body, dict) else "not a JSON object"
        raise PrometheusError(f"Prometheus refused {promql!r}: {error}")
    try:
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
        value, stamp = float(raw), float(stamp)
    except (KeyError, TypeError, ValueError) as err:
        raise PrometheusError(f"Prometheus at {url} answered {promql!r} with something "
                              f"that is not a Prometheus result ({err!r})") from None
    current = time.time() if now is None else now
    if math.isnan(value) or current - stamp > stale_after:
        return None
    return value
