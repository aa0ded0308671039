"""The goodput benchmark's setup: spares for twice the nodes expected down, failures
counted in the run itself (not the warm-up before it), and its charts."""

from __future__ import annotations

import math

import pytest
from bench.goodput import drawn, provisioned

from goodput_operator.simulate.chart import line_chart
from goodput_operator.simulate.plan import expected_down

pytestmark = pytest.mark.unit


def test_a_provisioned_fleet_holds_spares_for_twice_the_nodes_expected_down() -> None:
    scenario = provisioned("synthetic:trn2:64", days=7, seed=1)
    assert scenario.fleet.spare_nodes == math.ceil(2 * expected_down(scenario)) > 0
    assert scenario.workers() == [256 - scenario.fleet.spare_nodes]


def test_only_the_failures_of_the_run_are_counted_not_the_warm_up() -> None:
    scenario = provisioned("synthetic:trn2:64", days=7, seed=1)
    failures = scenario.failures()
    assert min(f.time for f in failures) < 0 < drawn(scenario) < len(failures)


def test_a_chart_has_a_line_and_a_legend_entry_per_policy() -> None:
    svg = line_chart("t", "x", {"ours": [(1, 99.0), (2, 98.0)], "kueue": [(1, 90.0)]})
    assert svg.startswith("<svg") and svg.count("<polyline") == 2
    assert ">ours</text>" in svg and ">kueue</text>" in svg
    assert line_chart("t", "x", {}) == ""
