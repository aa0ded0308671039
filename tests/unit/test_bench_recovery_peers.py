"""The recovery head-to-head with JobSet (bench/recovery_peers.py): the JobSets it submits
at their defaults and tuned, when it counts a gang as running again, and what it says a
recovery kept (the run itself needs the sandbox)."""

from __future__ import annotations

from typing import Any

import pytest
from bench import recovery_peers as bench

from goodput_operator import names
from tests.unit.test_jobset_peer import unknown_to_jobset

pytestmark = pytest.mark.unit
Obj = dict[str, Any]


def pod(rank: int, node: str | None, phase: str = "Running", uid: str = "",
        deleting: bool = False) -> Obj:
    meta: Obj = {"uid": uid or f"u{rank}", "labels": {bench.INDEX_LABEL: str(rank)}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-04T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}


def test_at_its_defaults_the_jobset_sets_nothing_jobset_or_the_job_leave_to_defaults() -> None:
    body = bench.jobset_gang("g", tuned=False)
    [replicated] = body["spec"]["replicatedJobs"]
    job = replicated["template"]["spec"]
    assert "failurePolicy" not in body["spec"] and "backoffLimit" not in job
    assert "tolerations" not in job["template"]["spec"]


def test_tuned_the_gang_is_evicted_at_the_taint_and_restarted_whole() -> None:
    body = bench.jobset_gang("g", tuned=True)
    job = body["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert body["spec"]["failurePolicy"] == {"maxRestarts": 10}
    assert job["backoffLimit"] == 0
    tolerations = job["template"]["spec"]["tolerations"]
    assert {t["key"] for t in tolerations} == {"node.kubernetes.io/unreachable",
                                               "node.kubernetes.io/not-ready"}
    assert all(t["tolerationSeconds"] == 0 and t["effect"] == "NoExecute"
               for t in tolerations)


@pytest.mark.parametrize(("what", "pods", "running"), [
    ("every rank running", [pod(0, "a"), pod(1, "b"), pod(2, "c")], True),
    ("one still pending", [pod(0, "a"), pod(1, "b", "Pending"), pod(2, "c")], False),
    ("one on the failed node", [pod(0, "a"), pod(1, "x"), pod(2, "c")], False),
    ("one rank twice", [pod(0, "a"), pod(0, "b", uid="v"), pod(2, "c")], False),
    ("a deleted pod does not count", [pod(0, "a"), pod(1, "x", deleting=True),
                                      pod(1, "b", uid="n"), pod(2, "c")], True),
    ("one short", [pod(0, "a"), pod(2, "c")], False),
])
def test_the_gang_runs_again_when_every_rank_runs_off_the_failed_node(
        what: str, pods: list[Obj], running: bool) -> None:
    assert (bench.gang_state(pods, frozenset({"x"})) is not None) is running, what


def test_off_two_failed_nodes_and_by_the_rank_label_of_its_system() -> None:
    pods = [pod(0, "a"), pod(1, "b"), pod(2, "c")]
    assert bench.gang_state(pods, frozenset({"x", "c"})) is None
    assert bench.gang_state(pods, frozenset({"x", "y"})) is not None
    assert bench.gang_state(pods, frozenset(), rank_label=names.RANK_LABEL) is None
    assert bench.gang_state(pods, frozenset(), workers=4) is None  # one rank short
    assert bench.gang_state([*pods, pod(3, "d")], frozenset(), workers=4) is not None


@pytest.mark.parametrize(("what", "pods", "under_way"), [
    ("the gang as it was", [pod(0, "a"), pod(1, "b"), pod(2, "c")], False),
    ("the lost pod going", [pod(0, "a"), pod(1, "b", deleting=True), pod(2, "c")], False),
    ("its replacement made, not yet bound", [pod(0, "a"), pod(1, None, "Pending", uid="n"),
                                             pod(2, "c")], True),
    ("a new pod already going does not count", [pod(0, "a"), pod(1, None, uid="n",
                                                                 deleting=True)], False),
])
def test_the_first_replacement_is_under_way_once_a_new_pod_exists(
        what: str, pods: list[Obj], under_way: bool) -> None:
    before = {0: ("a", "u0"), 1: ("b", "u1"), 2: ("c", "u2")}
    assert bench.replacing(pods, before) is under_way, what


def test_what_a_recovery_kept() -> None:
    domains = {"a": "us0", "b": "us0", "c": "us0", "d": "us0", "e": "us1"}
    before = {0: ("a", "u0"), 1: ("b", "u1"), 2: ("c", "u2")}
    on_a_spare = {0: ("a", "u0"), 1: ("d", "n1"), 2: ("c", "u2")}
    assert bench.compare(before, on_a_spare, domains, 1) == {
        "recreated": 1, "ranks_kept": True, "domains_kept": True}
    elsewhere = {0: ("c", "n0"), 1: ("e", "n1"), 2: ("a", "n2")}
    assert bench.compare(before, elsewhere, domains, 1) == {
        "recreated": 3, "ranks_kept": False, "domains_kept": False}
    two_spares = {0: ("a", "u0"), 1: ("d", "n1"), 2: ("e", "n2")}
    assert bench.compare(before, two_spares, domains, 1, 2) == {
        "recreated": 2, "ranks_kept": True, "domains_kept": False}
    assert bench.compare(before, two_spares, domains, 1)["ranks_kept"] is False


def test_each_second_failure_trial_is_a_line() -> None:
    rows = [{"system": "ours", "outcome": "recovered", "second_failure": 0.4, "total": 9.1,
             "restarts": 2, "recreated": 3, "ranks_kept": True, "domains_kept": False},
            {"system": "kueue-tas-hotswap", "outcome": "timed out", "second_failure": 41.0}]
    lines = bench.double_table(rows).splitlines()
    assert lines[2] == "| ours | recovered | 0.4 | 9.1 | 2 | 3 | True | False |"
    assert lines[3] == "| kueue-tas-hotswap | timed out | 41.0 | None | None | None | None | " \
        "None |"


def test_the_table_gives_ours_against_each_jobset() -> None:
    rows = [{"system": "ours", "outcome": "recovered", "total": 5.0, "k8s_taint": 22.0,
             "recreated": 3, "ranks_kept": True, "domains_kept": True},
            {"system": "jobset-tuned", "outcome": "recovered", "total": 25.0,
             "k8s_taint": 22.0, "recreated": 3, "ranks_kept": False, "domains_kept": True},
            {"system": "jobset-defaults", "outcome": "timed out", "k8s_taint": 23.0}]
    found = bench.summary(rows)
    assert found["jobset-defaults"]["recovered"] == 0
    assert found["jobset-defaults"]["total_median_s"] is None
    lines = bench.table(found).splitlines()
    assert lines[2] == "| ours | 1/1 | 5.0 | 1.0 | 22.0 | [3] | 1/1 | 1/1 |"
    assert lines[3] == "| jobset-tuned | 1/1 | 25.0 | 0.2 | 22.0 | [3] | 0/1 | 1/1 |"
    assert lines[4].startswith("| jobset-defaults | 0/1 | None | n/a |")


@pytest.mark.parametrize("tuned", [False, True])
def test_every_field_of_the_jobsets_is_one_jobsets_crd_knows(tuned: bool) -> None:
    assert unknown_to_jobset(bench.jobset_gang("g", tuned)["spec"]) == []


def test_the_kueue_gang_stays_in_one_ultraserver_and_ends_at_the_taint() -> None:
    from goodput_operator.sandbox import peers
    job = bench.tas_gang("g")
    template = job["spec"]["template"]
    assert template["metadata"]["annotations"] == {peers.REQUIRED: bench.GROUP.domain_key}
    assert job["metadata"]["labels"] == {peers.QUEUE_LABEL: bench.QUEUE}
    assert "backoffLimit" not in job["spec"], "the Job's default makes the lost index again"
    assert all(t["tolerationSeconds"] == 0 for t in template["spec"]["tolerations"])
