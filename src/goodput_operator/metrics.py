"""Prometheus metrics, all prefixed goodput_ (served on /metrics by the operator).

`reference()` is docs/metrics.md (`make generate` writes it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

JOBS = Gauge("goodput_trainingjobs", "TrainingJobs by phase", ["phase"])
ACCELERATORS = Gauge("goodput_accelerators_allocated",
                     "Accelerators requested by pods (or reserved) in an UltraServerGroup",
                     ["group"])
PLACEMENT_SECONDS = Histogram(
    "goodput_placement_latency_seconds", "Time to solve one gang placement",
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0))
PENDING_SECONDS = Histogram(
    "goodput_time_pending_seconds", "From job creation to its placement",
    buckets=(0.1, 0.5, 1, 5, 15, 60, 300, 1800, 7200))
RECONCILE_ERRORS = Counter("goodput_reconcile_errors_total",
                           "Reconcile passes of one object that raised", ["kind"])
PASS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30)
RECONCILE_OBJECT_SECONDS = Histogram(
    "goodput_reconcile_seconds",
    "Applying one object's decision (its API writes), as controller-runtime's reconcile time",
    ["kind"], buckets=PASS_BUCKETS)
RECONCILE_SECONDS = Histogram("goodput_reconcile_pass_seconds",
                              "One pass over every group, TrainingJob and InferenceEndpoint "
                              "(the longest any change waits to be acted on)",
                              buckets=PASS_BUCKETS)
URGENT_SECONDS = Histogram("goodput_reconcile_urgent_seconds",
                           "Groups and TrainingJobs decided and applied again while a pass "
                           "applies the endpoints' writes, for an urgent change",
                           buckets=PASS_BUCKETS)
QUARANTINES = Counter("goodput_quarantines_total",
                      "Nodes quarantined, by group, reason and failure class",
                      ["group", "reason", "failure_class"])
QUARANTINED = Gauge("goodput_quarantined_nodes", "Nodes in quarantine", ["group"])
BULK_LIMIT = Gauge("goodput_bulk_write_limit",
                   "The endpoints' pod writes allowed in flight at once: halved while the API "
                   "server answers slowly, grown back one a round while it is quick")
RECOVERY_SECONDS = Histogram(
    "goodput_recovery_seconds", "Each recovery's phases: detection, replacement, restart",
    ["phase"], buckets=(0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 900))
BADPUT_SECONDS = Counter("goodput_badput_seconds_total",
                         "Seconds lost to incidents (all phases and lost work), by cause",
                         ["cause"])
GOODPUT_RATIO = Gauge("goodput_ratio", "Productive / (productive + lost) seconds per job",
                      ["namespace", "trainingjob"])
REPORTS = Counter("goodput_reports_total", "Worker reports by kind and HTTP status",
                  ["kind", "code"])
TOKEN_REVIEWS = Counter("goodput_token_reviews_total",
                        "TokenReviews the report channel asked the API server for, by outcome "
                        "(authenticated, rejected, error)", ["outcome"])
STRAGGLERS = Counter("goodput_stragglers_total",
                     "Ranks found persistently slower than their peers (health.straggler)",
                     ["namespace", "trainingjob"])
SDC_SUSPICIONS = Counter("goodput_sdc_suspicions_total",
                         "Ranks whose fingerprint disagreed with their replicas' majority",
                         ["namespace", "trainingjob"])
PROBES = Counter("goodput_probes_total", "SDC probe results received, clean or bad",
                 ["result"])
PROBE_JOBS = Counter("goodput_probe_jobs_total", "SDC probe Jobs started, by why",
                     ["trigger"])
ROLLBACK_STEPS = Counter("goodput_rollback_steps_total",
                         "Training steps given up by rolling back past corrupted checkpoints",
                         ["namespace", "trainingjob"])
SCALING_DECISIONS = Counter("goodput_scaling_decisions_total",
                            "Autoscaler decisions that changed an endpoint's size",
                            ["direction"])
RECOVERING_SECONDS = Gauge("goodput_trainingjob_recovering_seconds",
                           "How long a recovering job has been down (0 when not recovering)",
                           ["namespace", "trainingjob"])
STORM_GUARD = Gauge("goodput_storm_guard_active",
                    "1 while a group's quarantine storm guard holds quarantines back",
                    ["group"])
SCALING_LIMITED = Gauge("goodput_scaling_limited",
                        "1 while an endpoint wants more replicas than it may have",
                        ["namespace", "inferenceendpoint"])
AUTOSCALER_EVALUATIONS = Counter(
    "goodput_autoscaler_evaluations_total",
    "Autoscaler evaluations (metrics queried, a size decided), one per scaling.intervalSeconds",
    ["namespace", "inferenceendpoint"])
SKIPPED_OBJECTS = Counter(
    "goodput_skipped_objects_total",
    "Objects the operator could not read (e.g. an unparseable resource quantity) and left "
    "out of its fleet model", ["kind"])
WATCH_RESTARTS = Counter(
    "goodput_watch_restarts_total",
    "The operator's own watches (pods) that failed and were started again", ["kind"])
API_REQUESTS = Counter("goodput_api_requests_total",
                       "Requests the operator sent to the API server (watches not counted)",
                       ["method"])
GC_PAUSE_SECONDS = Histogram(
    "goodput_gc_pause_seconds",
    "The operator's cyclic garbage collections, by generation: each stops every request "
    "and pass while it runs (a full one walks the whole cache)",
    ["generation"], buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
API_REQUEST_SECONDS = Histogram(
    "goodput_api_request_seconds",
    "How long the API server took to answer the operator, by method and resource (e.g. "
    "pods, trainingjobs/status): where a busy pass's seconds go",
    ["method", "resource"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
GROUP_ACCELERATOR_SECONDS = Gauge(
    "goodput_group_accelerator_seconds",
    "An UltraServerGroup's accelerator-seconds since its accounting began, by state "
    "(productive, serving, badput, idle, standby, spare, quarantined, unavailable, other, "
    "unobserved) and badput cause: status.accounting, which adds up to the whole",
    ["group", "state", "cause"])
NAMESPACE_ACCELERATOR_SECONDS = Gauge(
    "goodput_namespace_accelerator_seconds",
    "A namespace's accelerator-seconds in an UltraServerGroup, by state (productive, "
    "serving, standby, badput) and badput cause (status.accounting.namespaces)",
    ["group", "namespace", "state", "cause"])


def account(group: str, accounting: Mapping[str, Any]) -> None:
    """GROUP's status.accounting as the two accelerator-seconds gauges."""
    for state, value in accounting.items():
        if isinstance(value, int | float) and state not in ("acceleratorSeconds",
                                                             "namespacesOmitted"):
            GROUP_ACCELERATOR_SECONDS.labels(group, state, "").set(value)
    for cause, value in (accounting.get("badput") or {}).items():
        GROUP_ACCELERATOR_SECONDS.labels(group, "badput", cause).set(value)
    for entry in accounting.get("namespaces") or []:
        namespace = entry.get("namespace", "")
        for state in ("productive", "serving", "standby"):
            NAMESPACE_ACCELERATOR_SECONDS.labels(group, namespace, state, "").set(
                entry.get(state, 0))
        for cause, value in (entry.get("badput") or {}).items():
            NAMESPACE_ACCELERATOR_SECONDS.labels(group, namespace, "badput", cause).set(value)


SERIES_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                   "gauge": ("",)}


def families() -> list[tuple[str, str, str, list[str]]]:
    """(name, type, help, labels) of every goodput_ metric, sorted by name."""
    found = []
    for metric in globals().values():
        if isinstance(metric, Counter | Gauge | Histogram):
            described = next(iter(metric.describe()))
            found.append((described.name, described.type, described.documentation,
                          list(metric._labelnames)))
    return sorted(found)


def series_names() -> set[str]:
    """Every series name a query may use (a counter's _total, a histogram's _bucket...)."""
    return {name + suffix for name, kind, _, _ in families()
            for suffix in SERIES_SUFFIXES.get(kind, ("",))}


def reference() -> str:
    """The metrics reference in Markdown (docs/metrics.md)."""
    lines = ["# Metrics reference", "",
             "Served on `/metrics` (flag `--metrics-port`, default 9090) by every replica; a",
             "standby's gauges stay at zero. Generated from goodput_operator/metrics.py by",
             "`make generate`.",
             "", "| Series | Type | Labels | Meaning |", "|---|---|---|---|"]
    for name, kind, text, labels in families():
        series = name + SERIES_SUFFIXES.get(kind, ("",))[0]
        lines.append(f"| `{series}` | {kind} | {', '.join(labels) or '-'} | {text} |")
    return "\n".join(lines) + "\n"
