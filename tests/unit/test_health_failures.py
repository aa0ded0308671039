"""Worker failure classification: application vs infrastructure, by Kubernetes and rules."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.api.trainingjob import ExitCodeRule
from goodput_operator.health.failures import classify


def failed(code: int | None = 1, reason: str | None = None,
           disruption: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Failed", "conditions": []}
    if code is not None:
        status["containerStatuses"] = [{"state": {"terminated": {
            "exitCode": code, "finishedAt": "2027-01-15T08:00:00Z"}}}]
    if reason:
        status["reason"] = reason
    if disruption:
        status["conditions"].append({"type": "DisruptionTarget", "status": "True",
                                     "reason": disruption})
    return {"metadata": {"name": "p", "labels": {names.RANK_LABEL: "3"}}, "status": status}


RULES = [ExitCodeRule(codes=[74, 75], action="probe"), ExitCodeRule(codes=[2], action="fail"),
         ExitCodeRule(codes=[9], action="ignore"), ExitCodeRule(codes=[1], action="restart")]


@pytest.mark.parametrize(
    ("pod", "node_failed", "kind", "blame"),
    [
        (failed(1), False, "application", False),
        (failed(139), False, "application", False),         # unmatched: restart
        (failed(74), False, "infrastructure", True),
        (failed(2), False, "fail", False),
        (failed(9), False, "ignore", False),
        (failed(1), True, "infrastructure", False),         # the node already failed
        (failed(None, reason="NodeLost"), False, "infrastructure", False),
        (failed(137, disruption="DeletionByTaintManager"), False, "infrastructure", False),
    ],
)
def test_classification(pod: dict[str, Any], node_failed: bool, kind: str, blame: bool) -> None:
    verdict = classify(pod, RULES, node_failed)
    assert (verdict.kind, verdict.blame_node) == (kind, blame)
    assert verdict.detail.startswith("worker w3 (p)")
