"""Badput accounting: productive stretches, lost work since the checkpoint, totals."""

from __future__ import annotations

from typing import get_args, get_type_hints

import pytest

from goodput_operator.api import statuses
from goodput_operator.health import badput
from goodput_operator.times import millis

T = 1_800_000_000.0


def test_an_incident_closes_the_stretch_and_the_work_since_the_checkpoint_is_lost() -> None:
    status = {"goodput": {"since": millis(T)},
              "checkpoint": {"latest": {"step": 100, "path": "/c/100", "time": millis(T + 600)}}}
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
    status = {"goodput": {"since": millis(T)},
              "checkpoint": {"latest": {"step": 1, "time": millis(T - 50)}}}
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


def test_a_scripted_timeline_adds_up_to_wall_time_and_the_status_is_current() -> None:
    """Running from T; refreshed while running; a node fails at T+100 (checkpoint at
    T+70), detected at +105, replaced at +107, running again at +110; refreshed after.
    At every refresh productive + lost is the wall time since T, and productiveSeconds
    counts the running stretch (it used to read 0 until the next failure)."""
    status = badput.running_again({"goodput": {}}, T)
    status["goodput"] = badput.refreshed(status["goodput"], T + 40)
    assert (status["goodput"]["productiveSeconds"], status["goodput"]["ratio"]) == (40, 1.0)
    assert badput.refresh_due(status["goodput"], T + 40) == T + 40 + badput.REFRESH_SECONDS
    status["checkpoint"] = {"latest": {"step": 70, "path": "/c/70", "time": millis(T + 70)}}
    status = badput.open_incident(status, 1, "NodeFailure", "n1 lost", ["n1"], T + 100, T + 105)
    assert status["goodput"]["productiveSeconds"] == 70  # the refresh is not counted twice
    assert badput.refresh_due(status["goodput"], T + 105) is None  # nothing runs
    status = badput.running_again(badput.replaced(status, T + 107, "replace"), T + 110)
    goodput = badput.refreshed(status["goodput"], T + 150)
    lost = sum(goodput["lostSeconds"].values())
    assert goodput["lostSeconds"] == {"detection": 5, "replacement": 2, "restart": 3,
                                      "lostWork": 30}
    assert goodput["productiveSeconds"] == 70 + 40
    assert goodput["productiveSeconds"] + lost == pytest.approx(150)
    assert goodput["ratio"] == pytest.approx(110 / 150, abs=1e-4)
    stopped = badput.stopped({"goodput": goodput}, T + 160)["goodput"]
    assert stopped["productiveSeconds"] == 120 and stopped["since"] is None


def test_every_second_of_a_job_s_life_is_attributed_and_the_total_is_its_wall_time(
        ) -> None:
    """Created at T; queued 10 s; launched in 5; trains, saving checkpoints that stall
    it 2 s (T+40, verified) and 3 s (T+70, not verified); a node fails at T+100 and the
    restart rolls back to T+40 (the 3 s stall is redone work, counted once); suspended
    from T+150 to T+250; queued and placed again, a worker fails during the launch at
    T+261, and the job runs from T+270 to its end at T+300. At every step the buckets sum
    to the wall time, and at the end each holds what the script says."""
    status: dict = {"goodput": {}, "incidents": [], "checkpoint": {}}

    def at(now: float, stage: str | None = None, **changes: dict) -> None:
        status.update(changes)
        status["goodput"] = badput.staged(status, stage, now, created=T)
        spent = badput.attributed(status, now)
        assert sum(spent.values()) == pytest.approx(now - T), (now - T, spent)

    def committed(now: float, step: int, stall: float, verified: bool) -> None:
        ref = {"step": step, "path": f"/c/{step}", "time": millis(now), "saveSeconds": stall}
        checkpoint = status["checkpoint"]
        checkpoint["history"] = [*checkpoint.get("history", []), ref]
        checkpoint["latest"] = ref
        if verified:
            checkpoint["latestVerified"] = ref
        at(now, goodput=badput.with_stalls(status["goodput"], checkpoint, now))  # the pass

    at(T + 2, "queueing")                                   # the first pass
    at(T + 10, "launch")                                    # placed
    at(T + 15, None, **badput.running_again(status, T + 15))
    committed(T + 40, 40, 2, verified=True)
    committed(T + 70, 70, 3, verified=False)
    at(T + 105, **badput.open_incident(status, 1, "NodeFailure", "n1", ["n1"], T + 100,
                                       T + 105, strict=True))  # failed at T+100
    at(T + 107, **badput.replaced(status, T + 107, "replace"))
    at(T + 110, **badput.running_again(status, T + 110))
    at(T + 150, "suspended", **badput.stopped(status, T + 150))
    at(T + 250, "queueing")                                 # resumed
    at(T + 260, "launch")
    at(T + 262, None, **badput.open_incident(status, 2, "ApplicationError", "exit 1", [],
                                             T + 261, T + 262))
    at(T + 265, **badput.replaced(status, T + 265, "restart"))
    at(T + 270, **badput.running_again(status, T + 270))
    at(T + 300, None, **badput.stopped(status, T + 300))

    goodput = status["goodput"]
    assert goodput["idleSeconds"] == {"queueing": 20, "suspended": 100}
    assert goodput["lostSeconds"] == {"launch": 6, "checkpoint": 2, "detection": 6,
                                      "replacement": 5, "restart": 8, "lostWork": 60}
    assert goodput["productiveSeconds"] == (100 - 15 - 60 - 2) + (150 - 110) + (300 - 270)
    assert goodput.get("stage") is None
    assert goodput["stallsCountedTo"] == millis(T + 70)
    assert badput.attributed(status, T + 300) == pytest.approx({
        "productive": 93, "queueing": 20, "suspended": 100, "launch": 6, "checkpoint": 2,
        "detection": 6, "replacement": 5, "restart": 8, "lostWork": 60})
    assert badput.ratio(goodput, T + 300) == pytest.approx(93 / (93 + 87), abs=1e-4)


@pytest.mark.parametrize(("running", "every"), [(0, 30.0), (60, 30.0), (200, 100.0),
                                                (31_000, 15_500.0)])
def test_the_refresh_period_keeps_refresh_writes_at_two_a_second(running: int,
                                                                   every: float) -> None:
    assert badput.refresh_seconds(running) == every


def test_the_buckets_are_the_status_keys_mypy_checks() -> None:
    """badput._add writes a bucket by name (the one cast the books take): its names are
    exactly the schema's, so no bucket lands in a key the CRD would prune."""
    assert set(get_args(badput.IdleBucket)) == set(statuses.IdleSecondsDict.__annotations__)
    assert set(get_args(badput.LostBucket)) == set(statuses.LostSecondsDict.__annotations__)
    assert set(get_args(badput.Stage)) == set(get_args(
        get_type_hints(statuses.StageDict)["name"]))


def test_an_incident_field_the_schema_lacks_is_refused() -> None:
    books = badput.open_incident({}, 1, "NodeFailure", "n0 lost", ["n0"], 10.0, 12.0)
    assert badput.update_incident(books, action="replace")["incidents"][-1]["action"] == \
        "replace"
    with pytest.raises(TypeError, match="replacedBy"):
        badput.update_incident(books, replacedBy="n1")
