"""metav1.Condition bookkeeping: lastTransitionTime changes only when status flips."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def set_condition(conditions: list[Obj], type_: str, status: bool | str, reason: str,
                  message: str, generation: int | None, at: str) -> list[Obj]:
    """A new list with condition `type_` set; the others are kept as they are. AT: the
    time of a transition (the decision's clock, never read here)."""
    value = status if isinstance(status, str) else ("True" if status else "False")
    previous = next((c for c in conditions if c.get("type") == type_), None)
    if previous is None or previous.get("status") != value:
        transition = at
    else:
        transition = previous["lastTransitionTime"]
    condition: Obj = {"type": type_, "status": value, "reason": reason, "message": message,
                 "lastTransitionTime": transition}
    if generation is not None:
        condition["observedGeneration"] = generation
    return [c for c in conditions if c.get("type") != type_] + [condition]


def get_condition(conditions: list[Obj], type_: str) -> Obj | None:
    return next((c for c in conditions if c.get("type") == type_), None)


def is_true(conditions: list[Obj], type_: str) -> bool:
    found = get_condition(conditions, type_)
    return found is not None and found.get("status") == "True"
