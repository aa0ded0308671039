"""Replica groups: restart whole groups, roll out group by group, scale down by domain."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.api.inferenceendpoint import InferenceEndpointSpec, Rollout
from goodput_operator.decide.replicas import EndpointPlan, Trouble, Wanted, plan_groups
from goodput_operator.resources import inference as build
from goodput_operator.resources.fabric import Fabric

SPEC = {"ultraServerGroup": "g", "model": {"name": "m"},
        "replicaShape": {"workers": 2, "acceleratorsPerWorker": 4},
        "template": {"spec": {"containers": [{"name": "s", "image": "i"}]}}}
IE = {"metadata": {"name": "ie", "namespace": "ns", "uid": "u"}, "spec": SPEC}


def plan(pods: list[dict[str, Any]], size: int, desired: int, revision: str,
         rollout: Rollout, lost: set[str]) -> EndpointPlan:
    """DESIRED groups of SIZE pods at REVISION planned from PODS, LOST nodes gone."""
    return plan_groups(pods, Wanted(size, desired, revision, rollout), Trouble(lost))


def group(index: int, rev: str, ready: bool = True, domain: str = "d0",
          phase: str = "Running", node: str | None = None) -> list[dict[str, Any]]:
    pods = build.group_pods(IE, InferenceEndpointSpec.model_validate(SPEC), index, rev,
                            Fabric("nvidia.com/gpu", 8))
    for member, pod in enumerate(pods):
        pod["spec"]["schedulingGates"] = []
        pod["spec"]["nodeName"] = node or f"{domain}-n{index}{member}"
        pod["metadata"]["annotations"][names.DOMAIN_ANNOTATION] = domain
        pod["status"] = {"phase": phase, "conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]}
    return pods


def test_missing_groups_are_created_at_the_lowest_free_indexes() -> None:
    result = plan(group(1, "r1"), 2, 3, "r1", Rollout(), set())
    assert result.create == [(0, "r1"), (2, "r1")]


def test_a_failed_member_or_a_lost_node_restarts_its_whole_group() -> None:
    pods = group(0, "r1") + group(1, "r1", phase="Failed")[:1] + group(1, "r1")[1:] + \
        group(2, "r1", node="bad")
    result = plan(pods, 2, 3, "r1", Rollout(), {"bad"})
    assert sorted(result.delete) == [1, 2]
    assert "stopped" in result.delete[1] and "lost" in result.delete[2]
    assert result.create == [(3, "r1"), (4, "r1")]


def simulate(desired: int, rollout: Rollout, groups: int) -> list[tuple[int, int]]:
    """Roll `groups` groups from r1 to r2, letting new groups become ready one pass
    later; return (ready, total) after every pass."""
    state: dict[int, tuple[str, bool]] = {i: ("r1", True) for i in range(groups)}
    seen = []
    for _ in range(30):
        pods = [p for i, (rev, ready) in state.items() for p in group(i, rev, ready)]
        result = plan(pods, 2, desired, "r2", rollout, set())
        for index in result.delete:
            del state[index]
        state = {i: (rev, True) for i, (rev, _) in state.items()}  # last pass's are ready
        for index, rev in result.create:
            state[index] = (rev, False)
        seen.append((sum(1 for _, r in state.values() if r), len(state)))
        if all(rev == "r2" and ready for rev, ready in state.values()) and \
                len(state) == desired:
            return seen
    raise AssertionError(f"rollout did not finish: {state}")


@pytest.mark.parametrize(
    ("surge", "unavailable"), [(1, 0), (0, 1), (2, 1), ("50%", 0), (1, "25%")])
def test_a_rollout_keeps_within_max_surge_and_max_unavailable(surge: Any,
                                                              unavailable: Any) -> None:
    rollout = Rollout(maxSurge=surge, maxUnavailable=unavailable)
    desired = 4
    max_surge = {1: 1, 0: 0, 2: 2, "50%": 2}[surge]
    max_down = {0: 0, 1: 1, "25%": 1}[unavailable]
    for ready, total in simulate(desired, rollout, desired):
        assert total <= desired + max_surge
        assert ready >= desired - max_down


def test_scale_down_removes_the_groups_that_free_a_whole_domain() -> None:
    pods = group(0, "r1", domain="d0") + group(1, "r1", domain="d0") + \
        group(2, "r1", domain="d1")
    result = plan(pods, 2, 2, "r1", Rollout(), set())
    assert list(result.delete) == [2]                # d1 empties; d0 keeps both


def test_a_multi_node_replica_on_nvlink_joins_its_own_compute_domain_with_efa() -> None:
    gb200 = Fabric("nvidia.com/gpu", 4, efa_per_node=8, imex=True)
    spec = InferenceEndpointSpec.model_validate(SPEC)
    first, second = (build.group_pods(IE, spec, i, "r1", gb200) for i in (0, 1))
    assert {p["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] for p in first} == {
        "ie-r0-imex-channel"}
    assert second[0]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == \
        "ie-r1-imex-channel"
    resources = first[0]["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"nvidia.com/gpu": "4", "vpc.amazonaws.com/efa": "8"}
    env = {e["name"]: e["value"] for e in first[0]["spec"]["containers"][0]["env"]}
    assert env["FI_PROVIDER"] == "efa" and env["NCCL_SOCKET_IFNAME"] == "^lo,docker"
    sources = build.claim_sources(IE, first + second, None)
    assert [(s["kind"], s["metadata"]["name"]) for s in sources] == [
        ("ComputeDomain", "ie-r0-imex"), ("ComputeDomain", "ie-r1-imex")]
    rollout = build.group_pods(IE, spec, 0, "r2", gb200)   # a new revision, the same domain
    assert rollout[0]["spec"]["resourceClaims"] == first[0]["spec"]["resourceClaims"]
    single = InferenceEndpointSpec.model_validate(
        {**SPEC, "replicaShape": {"workers": 1, "acceleratorsPerWorker": 4}})
    assert "resourceClaims" not in build.group_pods(IE, single, 0, "r1", gb200)[0]["spec"]
