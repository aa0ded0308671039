"""Every decision the unit suite makes through `goodput_operator.decide` (decide, decide_jobs,
decide_endpoints, decide_groups: every kind's pass, in every case the suite writes) writes
only status keys its CRD declares: the API server would silently prune any other
(tests/unit/test_status_keys.py has the check and its own cases)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import pytest

from goodput_operator import decide
from goodput_operator.api import crds

Obj = dict[str, Any]
CHECKED = {  # the names decide/__init__ calls, and the kind each decides
    "decide_job": "TrainingJob", "decide_delegated": "TrainingJob",
    "decide_endpoint": "InferenceEndpoint", "decide_regions": "InferenceEndpoint",
    "decide_handed_off": "InferenceEndpoint", "decide_group": "UltraServerGroup"}


@cache
def status_schema(kind: str) -> Obj:
    [found] = [k for k in crds.KINDS if k.kind == kind]
    schema: Obj = crds.crd(found)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return dict(schema["properties"]["status"])


def undeclared(value: object, schema: Obj, path: str = "status") -> list[str]:
    """The keys of VALUE (a status, or part of one) that SCHEMA does not declare."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict):
        properties = schema.get("properties")
        if properties is None:
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                return [k for key, v in value.items()
                        for k in undeclared(v, extra, f"{path}[{key}]")]
            return [f"{path}.{key}" for key in value]
        return [f"{path}.{key}" if key not in properties else k
                for key, v in value.items()
                for k in ([f"{path}.{key}"] if key not in properties else
                          undeclared(v, properties[key], f"{path}.{key}") if v is not None
                          else [])]
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [k for i, v in enumerate(value) for k in undeclared(v, schema["items"],
                                                                   f"{path}[{i}]")]
    return []


def checked(kind: str, decide_one: Callable[..., Any]) -> Callable[..., Any]:
    def decided(*args: Any, **kwargs: Any) -> Any:
        decision = decide_one(*args, **kwargs)
        wrong = undeclared(decision.desired, status_schema(kind))
        if wrong:  # pytest.fail: not an Exception, so the pass cannot hand it back
            pytest.fail(f"{decide_one.__name__} wrote keys {kind}'s CRD does not declare: "
                        f"{wrong}")
        return decision
    return decided


@pytest.fixture(autouse=True)
def decisions_write_only_declared_status_keys(monkeypatch: pytest.MonkeyPatch
                                              ) -> Iterator[None]:
    for name, kind in CHECKED.items():
        monkeypatch.setattr(decide, name, checked(kind, getattr(decide, name)))
    yield
