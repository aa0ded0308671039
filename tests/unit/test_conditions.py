"""Conditions follow metav1.Condition: transition time moves only on a status flip."""

from __future__ import annotations

import pytest

from goodput_operator.api.conditions import get_condition, is_true, set_condition

pytestmark = pytest.mark.unit


def test_transition_time_changes_only_when_status_flips() -> None:
    first = set_condition([], "Placed", False, "Waiting", "no room", 1, at="t1")
    same = set_condition(first, "Placed", False, "StillWaiting", "still no room", 2, at="t2")
    assert get_condition(same, "Placed") == {
        "type": "Placed", "status": "False", "reason": "StillWaiting",
        "message": "still no room", "lastTransitionTime": "t1", "observedGeneration": 2}
    flipped = set_condition(same, "Placed", True, "Placed", "ok", 2, at="t3")
    assert get_condition(flipped, "Placed")["lastTransitionTime"] == "t3"
    assert is_true(flipped, "Placed")


def test_other_conditions_are_kept() -> None:
    both = set_condition(set_condition([], "A", True, "R", "", None, "t"), "B", "Unknown",
                         "R", "", None, "t")
    assert [c["type"] for c in both] == ["A", "B"]
    assert not is_true(both, "B") and not is_true(both, "C")
