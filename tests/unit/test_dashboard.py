"""The Grafana dashboard shipped with the chart queries only metrics the operator exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

import goodput_operator.metrics  # noqa: F401  (registers the operator's metrics)

DASHBOARD = Path(__file__).resolve().parents[2] / "charts/goodput-operator/dashboards" \
    / "goodput-operator.json"
SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created")


def exported() -> set[str]:
    names = set()
    for collector in REGISTRY.collect():
        if collector.name.startswith("goodput_"):
            names.add(collector.name)
            names.update(collector.name + s for s in SUFFIXES)
    return names


def test_every_panel_queries_metrics_the_operator_exports() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    known = exported()
    seen = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = set(re.findall(r"\bgoodput_[a-z_]+", target["expr"]))
            assert names, f"{panel['title']}: no goodput_ metric in {target['expr']}"
            assert names <= known, f"{panel['title']}: unknown {names - known}"
            seen |= names
    for wanted in ("goodput_ratio", "goodput_badput_seconds_total", "goodput_trainingjobs",
                   "goodput_recovery_seconds_bucket", "goodput_quarantined_nodes",
                   "goodput_scaling_decisions_total", "goodput_accelerators_allocated"):
        assert wanted in seen, wanted
