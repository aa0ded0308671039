"""Badput accounting: productive stretches, lost work since the checkpoint, totals."""

from __future__ import annotations

import pytest

from goodput_operator.health import badput
from goodput_operator.health.quarantine import iso

T = 1_800_000_000.0


def test_an_incident_closes_the_stretch_and_the_work_since_the_checkpoint_is_lost() -> None:
    status = {"goodput": {"since": iso(T)},
              "checkpoint": {"latest": {"step": 100, "path": "/c/100", "time": iso(T + 600)}}}
    opened = badput.open_incident(status, 1, "NodeFailure", "n1 lost", ["n1"], T + 1000,
                                  T + 1006)
    incident = opened["incidents"][-1]
    assert incident["lostWorkSeconds"] == 400 and incident["detectionSeconds"] == 6
    assert incident["resumeFrom"]["step"] == 100
    assert opened["goodput"]["productiveSeconds"] == 600 and opened["goodput"]["since"] is None
    replaced = badput.replaced(opened, T + 1007, "replace")
    closed = badput.running_again(replaced, T + 1010)
    goodput = closed["goodput"]
    assert goodput["lostSeconds"] == {"detection": 6, "replacement": 1, "restart": 3,
                                      "lostWork": 400}
    assert goodput["lostByCause"] == {"NodeFailure": 410}
    assert badput.ratio(goodput, T + 1010) == pytest.approx(600 / 1010, abs=1e-4)
    assert badput.ratio(goodput, T + 2010) == pytest.approx(1600 / 2010, abs=1e-4)


def test_without_a_checkpoint_in_this_stretch_all_of_it_is_lost() -> None:
    status = {"goodput": {"since": iso(T)},
              "checkpoint": {"latest": {"step": 1, "time": iso(T - 50)}}}
    opened = badput.open_incident(status, 1, "ApplicationError", "exit 1", [], T + 30, T + 30)
    assert opened["incidents"][-1]["lostWorkSeconds"] == 30
    assert opened["goodput"]["productiveSeconds"] == 0


def test_incidents_are_bounded() -> None:
    status: dict = {}
    for i in range(40):
        status = badput.open_incident(status, i + 1, "ApplicationError", "x", [], T, T)
    assert len(status["incidents"]) == badput.MAX_INCIDENTS
    assert status["incidents"][-1]["restart"] == 40


@pytest.mark.parametrize(("streak", "delay"), [(0, 0), (1, 10), (2, 20), (3, 40), (8, 600)])
def test_backoff_doubles_and_is_capped(streak: int, delay: float) -> None:
    assert badput.backoff_seconds(10, 600, streak) == delay
