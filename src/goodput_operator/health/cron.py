"""Five-field cron schedules (minute hour day-of-month month day-of-week), for the SDC
probe sweeps. Pure: `*`, `*/n`, `a-b`, `a-b/n`, lists; day-of-week 0-7 (0 and 7 are
Sunday); when both day fields are restricted a day matching either counts, as in cron."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))


class CronError(ValueError):
    pass


def _field(text: str, low: int, high: int) -> set[int]:
    values: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if body == "*":
            start, end = low, high
        elif "-" in body:
            start, end = (int(x) for x in body.split("-", 1))
        else:
            start = end = int(body)
        if step < 1 or start < low or end > high or start > end:
            raise CronError(f"{part!r} is outside {low}-{high}")
        values.update(range(start, end + 1, step))
    return values


def parse(expression: str) -> tuple[set[int], ...]:
    fields = expression.split()
    if len(fields) != 5:
        raise CronError(f"{expression!r}: a schedule has 5 fields")
    try:
        parsed = tuple(_field(f, lo, hi) for f, (lo, hi) in zip(fields, RANGES, strict=True))
    except ValueError as err:
        raise CronError(f"{expression!r}: {err}") from None
    if 7 in parsed[4]:
        parsed[4].add(0)
    return parsed


def matches(expression: str, when: datetime) -> bool:
    return _matcher(expression)(when)


def _matcher(expression: str) -> Callable[[datetime], bool]:
    """EXPRESSION parsed once, as a test of a minute: `due` walks up to a month of minutes,
    and parsing the schedule again for each made that walk cost a quarter of a second a
    pass for a schedule that seldom matches (`0 0 31 2 *` never does)."""
    minute, hour, dom, month, dow = parse(expression)
    fields = expression.split()
    either = fields[2] != "*" and fields[4] != "*"

    def test(when: datetime) -> bool:
        day_ok = (when.day in dom, (when.isoweekday() % 7) in dow)
        day = (day_ok[0] or day_ok[1]) if either else (day_ok[0] and day_ok[1])
        return when.minute in minute and when.hour in hour and when.month in month and day
    return test


def due(expression: str, last: float, now: float) -> bool:
    """Whether a scheduled minute passed after LAST, up to NOW (epoch seconds; UTC). A
    month without one (or a LAST older than that) counts as due: the walk is bounded."""
    test = _matcher(expression)
    start = datetime.fromtimestamp(last, UTC).replace(second=0, microsecond=0)
    end = datetime.fromtimestamp(now, UTC)
    minute = start + timedelta(minutes=1)
    for _ in range(60 * 24 * 31):
        if minute > end:
            return False
        if test(minute):
            return True
        minute += timedelta(minutes=1)
    return True
