"""Parse at the edge (api.views): a TrainingJob's or InferenceEndpoint's spec is validated
once per version of its spec, by the operator's cache as a pass's snapshot is taken, and
never by a decision."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goodput_operator.api.inferenceendpoint import InferenceEndpointSpec
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.api.views import job_view
from goodput_operator.controllers.state import State
from goodput_operator.decide import decide
from tests.unit.test_decide_endpoint import endpoint
from tests.unit.world import NOW, group_object, group_spec, job, nodes

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
SRC = Path(__file__).resolve().parents[2] / "src" / "goodput_operator"


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Each spec validation, counted by the module that asked for it (as src/-relative
    paths: decide/job.py, api/views.py)."""
    seen: Counter[str] = Counter()
    for model in (TrainingJobSpec, InferenceEndpointSpec):
        original = model.model_validate.__func__  # type: ignore[attr-defined]

        def counted(cls: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            caller = Path(sys._getframe(1).f_code.co_filename).resolve()
            seen[str(caller.relative_to(SRC)) if caller.is_relative_to(SRC)
                 else caller.name] += 1
            return _original(cls, *args, **kwargs)

        monkeypatch.setattr(model, "model_validate", classmethod(counted))
    yield seen


def fleet_state(jobs: int, endpoints: int) -> State:
    state = State()
    state.upsert_group(group_object(group_spec()))
    for body in nodes(domains=8).values():
        state.upsert_node(body)
    for i in range(jobs):
        state.upsert_job(job(f"j{i}", workers=2 + i % 3))
    for i in range(endpoints):
        state.upsert_endpoint(endpoint(f"ie{i}", replicas=1))
    return state


def test_a_steady_pass_over_many_jobs_and_endpoints_validates_no_spec_in_decide(
        validations: Counter[str]) -> None:
    state = fleet_state(jobs=40, endpoints=20)
    decide(state.snapshot(NOW))  # the first pass: each spec parsed once, by its view
    first = Counter(validations)
    assert first == Counter({"api/views.py": 60}), first
    validations.clear()
    for second in range(3):  # steady passes: nothing changed, nothing parsed again
        plan = decide(state.snapshot(NOW + 1 + second))
        assert len(plan.jobs) == 40 and len(plan.endpoints) == 20
    assert validations == Counter(), validations


def test_a_new_version_of_one_spec_is_parsed_once_and_the_others_not_at_all(
        validations: Counter[str]) -> None:
    state = fleet_state(jobs=10, endpoints=0)
    decide(state.snapshot(NOW))
    validations.clear()
    changed = job("j3", workers=4)
    changed["metadata"]["generation"] = 2
    state.upsert_job(changed)
    decide(state.snapshot(NOW + 1))
    decide(state.snapshot(NOW + 2))
    assert validations == Counter({"api/views.py": 1}), validations


def test_a_status_write_or_a_new_object_with_the_same_spec_parses_nothing(
        validations: Counter[str]) -> None:
    """The watch brings a new object for every status write the operator makes: its spec
    is the same, so its view lends the parse it has."""
    first = job_view(job("j", workers=2))
    validations.clear()
    again = job("j", workers=2, status={"phase": "Running"})
    view = job_view(again, first)
    assert view.spec is first.spec and view.obj is again
    assert view.status == {"phase": "Running"}
    assert validations == Counter()


def test_an_invalid_spec_is_said_once_and_decided_without_a_parse() -> None:
    bad = job("bad", workers=0)
    view = job_view(bad)
    assert view.spec is None and "workers" in view.invalid
    state = State()
    state.upsert_group(group_object(group_spec()))
    state.upsert_job(bad)
    [decision] = decide(state.snapshot(NOW)).jobs
    assert decision.desired["phase"] == "Failed"
    assert decision.desired["message"] == f"invalid spec: {view.invalid}"
