"""Stragglers end to end: workers report their own time per step through the SDK; a rank
persistently slower than its peers is named with its node on the job's condition and an
event, and with action quarantine its node is quarantined and the rank moves."""

from __future__ import annotations

import json
from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.sdk import Reporter
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    Faults,
    Operator,
    apply,
    get_job,
    job_pods,
    training_job,
    wait_event,
    wait_phase,
)
from tests.e2e.test_recovery import quarantined, ranks, running_again, worker_token

pytestmark = pytest.mark.e2e


class Gang:
    """The job's workers as reporters: each round, every rank reports its next step with
    its own time per step (computeSeconds); rank SLOW takes twice as long."""

    def __init__(self, e2e: Operator, crds: Cluster, namespace: str, name: str) -> None:
        self.workers = {int(p["metadata"]["labels"][names.RANK_LABEL]):
                        Reporter(e2e.report_url, worker_token(crds, namespace,
                                                              p["metadata"]["name"]),
                                 job=f"{namespace}/{name}")
                        for p in job_pods(crds, namespace, name)}
        self.step = 0

    def round(self, slow: int) -> None:
        self.step += 1
        for rank, worker in self.workers.items():
            worker.report_step(self.step, {"loss": 1.0,
                                           "computeSeconds": 2.0 if rank == slow else 1.0})


def condition(crds: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return next((c for c in get_job(crds, namespace, name)["status"].get("conditions") or []
                 if c["type"] == "Straggler"), {})


def test_a_straggler_is_named_with_its_node_and_left_in_place_by_default(
        e2e: Operator, crds: Cluster, namespace: str, make_group: Any, faults: Faults) -> None:
    group = make_group()
    apply(crds, training_job("slow", group, 3,
                             failurePolicy={"straggler": {"minSteps": 8}}), namespace)
    before = ranks(wait_phase(crds, namespace, "slow", "Running"))
    assert condition(crds, namespace, "slow")["reason"] == "NoStepReports"
    gang = Gang(e2e, crds, namespace, "slow")

    def named() -> dict[str, Any] | None:
        gang.round(slow=1)                              # the workers keep training
        found = condition(crds, namespace, "slow")
        return found if found.get("status") == "True" else None
    found = wait_for(named, timeout=30, what="the Straggler condition")
    assert found["reason"] == "SlowRank"
    assert f"rank 1 on {before[1]}: 2.000s per step against its peers' 1.000s (2.0x, " \
           "computeSeconds)" in found["message"]
    wait_event(crds, "slow", "Straggler", f"rank 1 on {before[1]}", namespace)
    job = get_job(crds, namespace, "slow")
    assert job["status"]["phase"] == "Running" and job["status"].get("restarts", 0) == 0
    assert quarantined(crds, before[1]) is None
    assert "goodput_stragglers_total" in e2e.metrics()


def test_with_action_quarantine_the_straggler_s_node_is_quarantined_and_its_rank_moves(
        e2e: Operator, crds: Cluster, namespace: str, make_group: Any, faults: Faults) -> None:
    """(FAULTS: its teardown lifts the quarantine, for the tests after this one.)"""
    group = make_group(spares={"perDomain": 1})
    apply(crds, training_job("slowq", group, 3, failurePolicy={
        "straggler": {"minSteps": 8, "action": "quarantine"}}), namespace)
    before = ranks(wait_phase(crds, namespace, "slowq", "Running"))
    gang = Gang(e2e, crds, namespace, "slowq")

    def moved() -> bool:
        if (get_job(crds, namespace, "slowq")["status"].get("restarts") or 0) == 0:
            gang.round(slow=2)
        return quarantined(crds, before[2]) is not None
    wait_for(moved, timeout=30, what="the straggler's node quarantined")
    body = quarantined(crds, before[2])
    assert body is not None
    evidence = json.loads(body["metadata"]["annotations"][names.EVIDENCE_ANNOTATION])
    assert evidence["reason"] == "Straggler" and "rank 2" in evidence["evidence"]
    job = running_again(crds, namespace, "slowq", 1)
    after = ranks(job)
    assert after[2] != before[2] and {after[0], after[1]} == {before[0], before[1]}
    incident = job["status"]["incidents"][-1]
    assert incident["cause"] == "NodeFailure" and incident["nodes"] == [before[2]]
    assert "Straggler" in incident["message"]
    assert job["status"]["restartsByBudget"] == {"infrastructure": 1}
