"""The status models as TypedDicts (`api/statuses.py`, written by `make generate`).

Decisions build statuses as plain dicts (what the API server takes, at no cost to convert);
typed with these, mypy checks every key a decision writes and the type of its value
against the same pydantic models the CRDs are generated from. Every TypedDict is
`total=False`: a status is written as a merge patch of the keys that change.
"""

from __future__ import annotations

import json
import keyword
import types
import typing
from datetime import datetime
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from goodput_operator.api.inferenceendpoint import InferenceEndpointStatus
from goodput_operator.api.trainingjob import TrainingJobStatus
from goodput_operator.api.ultraservergroup import UltraServerGroupStatus

ROOTS: tuple[type[BaseModel], ...] = (TrainingJobStatus, InferenceEndpointStatus,
                                      UltraServerGroupStatus)
SUFFIX = "Dict"  # TrainingJobStatus -> TrainingJobStatusDict
HEADER = '''"""Status types generated from goodput_operator.api's pydantic models by `make generate`
(goodput_operator.api.typed); do not edit. Keys are the wire's (camelCase); every type is
total=False (a status write is a merge patch of the keys that change)."""

from __future__ import annotations
'''


def spelled(annotation: Any, needed: list[type[BaseModel]]) -> str:
    """ANNOTATION as Python source, the models it names appended to NEEDED."""
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return spelled(get_args(annotation)[0], needed)
    if origin in (Union, types.UnionType):
        return " | ".join(spelled(a, needed) for a in get_args(annotation))
    if origin is Literal:
        return f"Literal[{', '.join(json.dumps(a) for a in get_args(annotation))}]"
    if origin in (list, tuple):
        return f"list[{spelled(get_args(annotation)[0], needed)}]"
    if origin is dict:
        key, value = get_args(annotation)
        return f"dict[{spelled(key, needed)}, {spelled(value, needed)}]"
    if annotation is type(None):
        return "None"
    if annotation is datetime:
        return "str"  # goodput_operator.times' formats
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        needed.append(annotation)
        return annotation.__name__ + SUFFIX
    if annotation is Any:
        return "Any"
    if annotation in (str, int, float, bool):
        return str(annotation.__name__)
    raise TypeError(f"no TypedDict spelling for {annotation!r}")


def typed_dict(model: type[BaseModel], needed: list[type[BaseModel]]) -> str:
    """The class statement; the functional form where a key is a Python keyword (a
    scaling decision's `from`)."""
    name = model.__name__ + SUFFIX
    fields = {info.alias or key: spelled(info.annotation, needed)
              for key, info in model.model_fields.items()}
    if any(keyword.iskeyword(k) for k in fields):
        body = "".join(f"\n    {json.dumps(k)}: {v}," for k, v in fields.items())
        return f"{name} = TypedDict({json.dumps(name)}, {{{body}\n}}, total=False)"
    lines = [f"class {name}(TypedDict, total=False):",
             *(f"    {k}: {v}" for k, v in fields.items())]
    return "\n".join(lines if len(lines) > 1 else [*lines, "    pass"])


def source() -> str:
    """The module: every model the roots reach, each once, dependencies first."""
    done: dict[type[BaseModel], str] = {}

    def visit(model: type[BaseModel]) -> None:
        if model in done:
            return
        done[model] = ""  # cycles end here
        needed: list[type[BaseModel]] = []
        text = typed_dict(model, needed)
        for other in needed:
            visit(other)
        done.pop(model)
        done[model] = text

    for root in ROOTS:
        visit(root)
    body = "".join(f"\n\n{text}\n" for text in done.values())
    used = [n for n in ("Any", "Literal") if f"{n}[" in body or f" {n}" in body]
    return f"{HEADER}\nfrom typing import {', '.join([*used, 'TypedDict'])}\n{body}"
