"""TrainingJobs and InferenceEndpoints as the decisions read them: parsed at the edge.

A view is built once per version of its object's spec, by the operator's cache
(State.job_views and State.endpoint_views, as each pass's snapshot is taken) or, for tests
and tools that make a Snapshot by hand, as the snapshot is made; never by a decision. It
holds the parsed spec (or why it is invalid, said once on the object's status), and reads
the status and the attempt from the object it was built for, so a status the operator
writes is seen by the next pass without a new view.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from goodput_operator.api.base import describe_errors
from goodput_operator.api.inferenceendpoint import InferenceEndpointSpec
from goodput_operator.api.trainingjob import TrainingJobSpec

Obj = dict[str, Any]
Key = tuple[str, str]  # namespace, name
SpecT = TypeVar("SpecT", bound=BaseModel)


@dataclass(frozen=True)
class View(Generic[SpecT]):
    obj: Obj  # the object as listed (its status replaced as the operator writes it)
    spec: SpecT | None  # None: the spec is invalid
    invalid: str = ""  # why (pydantic's errors in one line), when it is

    @property
    def key(self) -> Key:
        meta = self.obj["metadata"]
        return meta["namespace"], meta["name"]

    @property
    def generation(self) -> int | None:
        found = self.obj["metadata"].get("generation")
        return int(found) if found is not None else None

    @property
    def status(self) -> Obj:
        """The status as the object carries it now (the operator's writes included)."""
        found: Obj = self.obj.get("status") or {}
        return found


@dataclass(frozen=True)
class JobView(View[TrainingJobSpec]):
    """A TrainingJob as the decisions, the builders and the report channel read it."""

    @property
    def restart(self) -> int:
        """The attempt running now (status.restarts; 0 before the first restart)."""
        return int(self.status.get("restarts") or 0)


@dataclass(frozen=True)
class EndpointView(View[InferenceEndpointSpec]):
    """An InferenceEndpoint as the decisions and the autoscaler read it."""


def _parsed(model: type[SpecT], obj: Obj, previous: View[SpecT] | None
            ) -> tuple[SpecT | None, str]:
    raw = obj.get("spec")
    if previous is not None and (previous.obj.get("spec") is raw
                                 or previous.obj.get("spec") == raw):
        return previous.spec, previous.invalid  # the same spec: parsed once
    try:
        return model.model_validate(raw), ""
    except ValidationError as err:
        return None, describe_errors(err)


def job_view(obj: Obj, previous: JobView | None = None) -> JobView:
    """OBJ's view; PREVIOUS (the view of an earlier version) lends its parse when the
    spec is the same."""
    if previous is not None and previous.obj is obj:
        return previous
    return JobView(obj, *_parsed(TrainingJobSpec, obj, previous))


def endpoint_view(obj: Obj, previous: EndpointView | None = None) -> EndpointView:
    if previous is not None and previous.obj is obj:
        return previous
    return EndpointView(obj, *_parsed(InferenceEndpointSpec, obj, previous))


def key_of(obj: Obj) -> Key:
    meta = obj["metadata"]
    return meta["namespace"], meta["name"]


def job_views(objects: Iterable[Obj], previous: Mapping[Key, JobView]) -> dict[Key, JobView]:
    return {key_of(o): job_view(o, previous.get(key_of(o))) for o in objects}


def endpoint_views(objects: Iterable[Obj], previous: Mapping[Key, EndpointView]
                   ) -> dict[Key, EndpointView]:
    return {key_of(o): endpoint_view(o, previous.get(key_of(o))) for o in objects}
