"""metav1.Condition bookkeeping: lastTransitionTime changes only when status flips."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from goodput_operator.api.statuses import ConditionDict

Conditions = Sequence[Mapping[str, Any]]  # as read back from a status, or as decided


def set_condition(conditions: Conditions, type_: str, status: bool | str, reason: str,
                  message: str, generation: int | None, at: str) -> list[ConditionDict]:
    """A new list with condition `type_` set; the others are kept as they are. AT: the
    time of a transition (the decision's clock, never read here)."""
    value = cast(Literal["True", "False", "Unknown"],
                 status if isinstance(status, str) else ("True" if status else "False"))
    previous = next((c for c in conditions if c.get("type") == type_), None)
    if previous is None or previous.get("status") != value:
        transition = at
    else:
        transition = previous["lastTransitionTime"]
    condition: ConditionDict = {"type": type_, "status": value, "reason": reason,
                                "message": message, "lastTransitionTime": transition}
    if generation is not None:
        condition["observedGeneration"] = generation
    return [*kept(conditions, type_), condition]


def kept(conditions: Conditions, type_: str) -> list[ConditionDict]:
    """CONDITIONS but TYPE_'s: conditions the status holds, written by this operator with
    ConditionDict's keys (set_condition), so read back as such."""
    return [cast(ConditionDict, c) for c in conditions if c.get("type") != type_]


def get_condition(conditions: Conditions, type_: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == type_), None)


def is_true(conditions: Conditions, type_: str) -> bool:
    found = get_condition(conditions, type_)
    return found is not None and found.get("status") == "True"
