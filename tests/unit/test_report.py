"""`goodput report`'s rendering: every state and cause a row, the rows summing to the
whole, costs from the group's price, a chart that parses."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest

from goodput_operator import report
from goodput_operator.health import accounting
from goodput_operator.times import millis
from tests.unit.world import NOW, job

pytestmark = pytest.mark.unit


def group(price: float | None = None) -> dict[str, Any]:
    held = accounting.Counter({("ns", "productive"): 32, ("", "idle"): 16,
                               ("", "quarantined"): 16})
    ledger = accounting.advanced(None, held, NOW)
    for tick in range(1, 11):  # an hour of passes 6 minutes apart
        ledger = accounting.advanced(ledger, held, NOW + 360 * tick,
                                     [("ns", "lostWork", 7200.0)] if tick == 10 else [])
    spec = {} if price is None else {"pricePerAcceleratorHour": price}
    return {"metadata": {"name": "trn2"}, "spec": spec,
            "status": {"accounting": accounting.to_status(ledger)}}


def test_every_state_and_cause_is_a_row() -> None:
    assert {r.removeprefix("badput/") for r in report.ROWS} == \
        set(accounting.STATES) | set(accounting.CAUSES)
    assert set(report.COLORS) == set(report.ROWS)


def test_the_rows_add_up_to_the_whole_and_the_price_gives_costs() -> None:
    running = job("dp", status={"goodput": {"since": millis(NOW), "productiveSeconds": 0}})
    found = report.summary(group(price=4.0), [running], now=NOW + 3600)
    assert found["accounted"] == found["acceleratorSeconds"] == 64 * 3600
    assert found["rows"]["productive"] == 30 * 3600
    assert found["rows"]["badput/lostWork"] == 2 * 3600
    assert found["cost"]["productive"] == 120.0 and found["namespaces"][0]["cost"] == 128.0
    assert found["jobs"] == [{"job": "ns/dp", "accelerators": 32, "acceleratorSeconds":
                              32 * 3600, "goodput": None, "cost": 128.0}]
    text = report.table(found)
    assert "account for 100.0%" in text and "badput/lostWork" in text
    assert "badput/restart" not in text  # causes with nothing in them are left out


def test_without_a_price_no_costs_and_the_chart_parses() -> None:
    found = report.summary(group(), [], now=NOW)
    assert "cost" not in found and "COST" not in report.table(found)
    chart = ET.fromstring(report.svg([found]))
    titles = [t.text or "" for t in chart.iter("{http://www.w3.org/2000/svg}title")]
    assert any(t.startswith("productive") for t in titles)
    assert any(t.startswith("quarantined") for t in titles)
