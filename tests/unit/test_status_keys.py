"""Decisions write only the status keys their CRD declares (the API server prunes any
other, silently): tests/unit/conftest.py checks every decision the unit suite makes; these
are the check's own cases."""

from __future__ import annotations

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
