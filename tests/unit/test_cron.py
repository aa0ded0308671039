"""Cron schedules of the probe sweeps."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from goodput_operator.health.cron import CronError, due, matches

T = datetime(2026, 11, 26, 6, 0, tzinfo=UTC)  # a Thursday


@pytest.mark.parametrize(
    ("expression", "when", "expected"),
    [
        ("0 */6 * * *", T, True),
        ("0 */6 * * *", T.replace(hour=7), False),
        ("*/15 * * * *", T.replace(minute=45), True),
        ("5-10/5 6 * * *", T.replace(minute=10), True),
        ("0 6 * * 4", T, True),                         # Thursday
        ("0 6 * * 0,7", T, False),
        ("0 6 1 * 4", T, True),                         # both day fields: either matches
        ("0 6 1 * 1", T, False),
        ("0 6 26 11 *", T, True),
    ],
)
def test_matching(expression: str, when: datetime, expected: bool) -> None:
    assert matches(expression, when) is expected


def test_due_when_a_scheduled_minute_passed_since_the_last_sweep() -> None:
    last = T.replace(hour=5, minute=30).timestamp()
    assert not due("0 */6 * * *", last, T.replace(minute=0, second=0).timestamp() - 1)
    assert due("0 */6 * * *", last, T.replace(second=5).timestamp())


@pytest.mark.parametrize("expression", ["* * * *", "61 * * * *", "*/0 * * * *", "a * * * *"])
def test_bad_schedules_are_refused(expression: str) -> None:
    with pytest.raises(CronError):
        matches(expression, T)


def test_a_schedule_is_parsed_once_however_long_the_walk(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """`0 0 31 2 *` never comes: a month of minutes is walked (and then counted as due),
    with the schedule parsed once, not once a minute (44,640 times a pass)."""
    from goodput_operator.health import cron
    parsed = []
    real = cron.parse
    monkeypatch.setattr(cron, "parse", lambda e: parsed.append(e) or real(e))
    last = T.timestamp()
    assert not due("0 0 31 2 *", last, last + 7 * 86_400)
    assert due("0 0 31 2 *", last, last + 40 * 86_400)
    assert parsed == ["0 0 31 2 *"] * 2
