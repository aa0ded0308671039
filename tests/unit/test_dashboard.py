"""The Grafana dashboard shipped with the chart queries only metrics the operator exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from goodput_operator import metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "charts/goodput-operator/dashboards/goodput-operator.json"
METRIC = re.compile(r"\bgoodput_[a-z_]+")


def test_every_panel_queries_metrics_the_operator_exports() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    known = metrics.series_names()
    seen = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = set(METRIC.findall(target["expr"]))
            assert names, f"{panel['title']}: no goodput_ metric in {target['expr']}"
            assert names <= known, f"{panel['title']}: unknown {names - known}"
            seen |= names
    for wanted in ("goodput_ratio", "goodput_badput_seconds_total", "goodput_trainingjobs",
                   "goodput_recovery_seconds_bucket", "goodput_quarantined_nodes",
                   "goodput_scaling_decisions_total", "goodput_accelerators_allocated"):
        assert wanted in seen, wanted


def test_the_operating_guide_documents_every_setting() -> None:
    from goodput_operator.operator.flags import FLAGS

    guide = (ROOT / "docs/operating.md").read_text()
    for flag in FLAGS:
        assert f"`{flag.flag}`" in guide and f"`{flag.env}" in guide, flag.flag
