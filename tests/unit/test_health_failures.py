"""Worker failure classification: application vs infrastructure, by Kubernetes and rules."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.api.trainingjob import ExitCodeRule
from goodput_operator.health.failures import classify


def failed(code: int | None = 1, reason: str | None = None,
           disruption: str | None = None, message: str | None = None,
           runtime_reason: str | None = None, pod_message: str | None = None
           ) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Failed", "conditions": []}
    if code is not None:
        terminated: dict[str, Any] = {"exitCode": code, "finishedAt": "2027-01-15T08:00:00Z"}
        if message is not None:
            terminated["message"] = message
        if runtime_reason is not None:
            terminated["reason"] = runtime_reason
        status["containerStatuses"] = [{"state": {"terminated": terminated}}]
    if reason:
        status["reason"] = reason
    if pod_message:
        status["message"] = pod_message
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


TRACEBACK = ("Traceback (most recent call last):\n  File \"/opt/goodput/trainer/train.py\", "
             "line 144, in wait_for_name\nsocket.gaierror: [Errno -2] Name or service not "
             "known\n\n")
W3 = "worker w3 (p) exited with code"


@pytest.mark.parametrize(
    ("pod", "detail"),
    [
        (failed(1, message=TRACEBACK), f'{W3} 1: an application error (last words: '
                                       '"socket.gaierror: [Errno -2] Name or service not '
                                       'known")'),
        (failed(2, message="bad config\n"),
         f'{W3} 2; failurePolicy.exitCodes says fail (last words: "bad config")'),
        (failed(1, message="x" * 500),
         f'{W3} 1: an application error (last words: "{"x" * 157}...")'),
        (failed(1, message="ok\x1b[31m red"),
         f'{W3} 1: an application error (last words: "ok?[31m red")'),
        (failed(1, message="  \n\n"), f"{W3} 1: an application error"),
        (failed(1), f"{W3} 1: an application error"),
        # the runtime's reason where it says more than "Error"
        (failed(1, runtime_reason="Error"), f"{W3} 1: an application error"),
        (failed(137, runtime_reason="OOMKilled"), f"{W3} 137 (OOMKilled): an application error"),
        # no container exited: the kubelet's own reason, never "code None" alone
        (failed(None, reason="OutOfcpu", pod_message="Node didn't have enough resource: cpu"),
         "worker w3 (p) failed with no container exit (OutOfcpu: Node didn't have enough "
         "resource: cpu): an application error"),
        (failed(None), "worker w3 (p) failed with no container exit (no reason given): an "
                       "application error"),
        # a verdict that blames the node lands on the node, read cluster-wide: no tenant's
        # words there
        (failed(74, message="I blame the node"),
         f"{W3} 74: its node is suspect by failurePolicy.exitCodes"),
    ],
)
def test_a_workers_last_log_line_is_quoted_where_the_job_alone_reads_it(
        pod: dict[str, Any], detail: str) -> None:
    """A worker's termination message (its log's tail: the operator sets
    FallbackToLogsOnError on workers) ends an application error's or a fatal exit's
    detail, cut and made printable."""
    assert classify(pod, RULES, False).detail == detail
