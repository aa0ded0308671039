"""Decisions write only the status keys their CRD declares (the API server prunes any
other, silently): tests/unit/conftest.py checks every decision the unit suite makes; these
are the check's own cases."""

from __future__ import annotations

import importlib
import textwrap
import typing
from pathlib import Path
from typing import Any

import pytest

from goodput_operator.decide import JobDecision
from tests.unit.conftest import checked, status_schema, undeclared

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("kind", "status", "wrong"), [
    ("TrainingJob", {"phase": "Running", "restarts": 1}, []),
    ("TrainingJob", {"phase": "Running", "bogus": 1}, ["status.bogus"]),
    ("TrainingJob", {"placement": {"slices": [{"firstRank": 0, "nodes": "n0", "x": 1}]}},
     ["status.placement.slices[0].x"]),
    ("TrainingJob", {"progress": {"step": 3, "metrics": {"loss": 0.5}}}, []),
    ("TrainingJob", {"preemption": None}, []),  # None removes a key: nothing to declare
    ("InferenceEndpoint", {"recentScaling": [{"from": 1, "to": 2, "why": ""}]},
     ["status.recentScaling[0].why"]),
    ("UltraServerGroup", {"totals": {"domains": 2, "racks": 1}}, ["status.totals.racks"]),
])
def test_undeclared_keys_are_found_at_any_depth(kind: str, status: dict[str, Any],
                                                wrong: list[str]) -> None:
    assert undeclared(status, status_schema(kind)) == wrong


def test_a_decision_that_writes_an_undeclared_key_fails_the_test_that_made_it() -> None:
    def decide_job(*_: Any) -> JobDecision:
        return JobDecision({}, {}, {"phase": "Running", "runningSince": "now"})

    with pytest.raises(pytest.fail.Exception, match=r"status\.runningSince"):
        checked("TrainingJob", decide_job)()


# mypy checks the keys too (api/statuses.py, generated): every decision's status is one of
# these types, and a write of a key its CRD lacks is a type error, found before a test runs.
DECIDED_STATUSES = [
    ("goodput_operator.decide.gang", "JobDecision", "TrainingJobStatusDict"),
    ("goodput_operator.decide.endpoint", "EndpointDecision", "InferenceEndpointStatusDict"),
    ("goodput_operator.decide.group", "GroupDecision", "UltraServerGroupStatusDict"),
]


@pytest.mark.parametrize(("module", "decision", "typed"), DECIDED_STATUSES)
def test_every_decision_carries_its_status_as_the_generated_type(
        module: str, decision: str, typed: str) -> None:
    hints = typing.get_type_hints(getattr(importlib.import_module(module), decision))
    assert hints["desired"].__name__ == typed


def test_mypy_refuses_a_decision_that_writes_a_key_its_crd_lacks(tmp_path: Path) -> None:
    from mypy import api

    snippet = tmp_path / "decision.py"
    snippet.write_text(textwrap.dedent("""
        from goodput_operator.decide.types import EndpointStatus, GroupStatus, JobStatus
        from goodput_operator.health import badput

        def job() -> JobStatus:
            desired: JobStatus = {"phase": "Running", "restarts": 1}
            desired["runningSince"] = "now"
            desired["goodput"] = badput.refreshed({}, 0.0)
            desired["phase"] = "Crashed"
            return desired

        def endpoint() -> EndpointStatus:
            return {"replicas": 2, "replica": 2}

        def group() -> GroupStatus:
            return {"totals": {"domains": 2, "racks": 1}}
        """))
    out, _, code = api.run(["--strict", "--no-incremental", "--follow-imports=silent",
                            "--python-version", "3.11", "--no-error-summary", str(snippet)])
    errors = sorted(line.split(" error: ")[1] for line in out.splitlines() if " error: " in line)
    assert code == 1
    assert [e.split("  [")[0] for e in errors] == [  # the badput line is typed right
        'Extra key "racks" for TypedDict "GroupTotalsDict"',
        'Extra key "replica" for TypedDict "InferenceEndpointStatusDict"',
        'TypedDict "TrainingJobStatusDict" has no key "runningSince"',
        'Value of "phase" has incompatible type "Literal[\'Crashed\']"; expected '
        '"Literal[\'Pending\', \'Placing\', \'Running\', \'Recovering\', \'Succeeded\', '
        '\'Failed\', \'Suspended\'] | None"',
    ], out
