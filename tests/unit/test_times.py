"""One home for time (goodput_operator.times): one parser, one format per kind of field,
and no other module of the operator formatting or parsing times of its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from goodput_operator import times

pytestmark = pytest.mark.unit

T = 1_764_900_123.456789


def test_each_format_round_trips_to_its_own_precision() -> None:
    assert times.seconds(T) == "2025-12-05T02:02:03Z"
    assert times.millis(T) == "2025-12-05T02:02:03.456Z"
    assert times.micros(T) == "2025-12-05T02:02:03.456789Z"
    assert times.parse(times.seconds(T)) == 1_764_900_123
    assert times.parse(times.millis(T)) == pytest.approx(T, abs=1e-3)
    assert times.parse(times.micros(T)) == pytest.approx(T, abs=1e-6)
    assert times.parse("2025-12-05T02:02:03+00:00") == 1_764_900_123  # the API server's


def test_absent_is_none_and_a_malformed_own_field_is_an_error() -> None:
    assert times.parse(None) is None and times.parse("") is None
    with pytest.raises(ValueError):
        times.parse("yesterday")


@pytest.mark.parametrize("value", [None, 7, "", "yesterday", "2025-12-05T02:02:03Z" * 4])
def test_a_foreign_time_that_is_not_one_reads_as_none(value: object) -> None:
    assert times.parse_foreign(value) is None


def test_no_other_module_of_the_operator_formats_or_parses_times() -> None:
    """The sandbox (developer tooling) and cron's calendar arithmetic aside."""
    root = Path(times.__file__).parent
    own = re.compile(r"strftime|fromisoformat|isoformat\(")
    found = [str(p.relative_to(root)) for p in root.rglob("*.py")
             if p.name != "times.py" and "sandbox" not in p.parts
             and own.search(p.read_text())]
    assert found == []
