"""Disaggregated serving (spec.roles), decided: prefill and decode pools sized apart,
placed in serving units (one UltraServer each here, or one network block), every unit
with both roles, the ratio bounded, and scale-down that empties units last."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.api.inferenceendpoint import (
    InferenceEndpointSpec,
    InferenceEndpointStatus,
    RatioBound,
)
from goodput_operator.autoscaling.algorithm import Decision
from goodput_operator.decide import EndpointDecision, Scaled, decide_endpoints, trial
from goodput_operator.decide.roles import request_of, room_for_role
from goodput_operator.decide.units import Units, prefill_wanted, removal_order
from goodput_operator.resources import inference as build
from tests.unit.test_decide_endpoint import SCALING, endpoint
from tests.unit.world import NOW, TRN2, conditions, world

pytestmark = pytest.mark.unit
Obj = dict[str, Any]


def roles(decode: Obj | None = None, prefill: Obj | None = None, **more: Any) -> Obj:
    """An endpoint of 2-node decode replicas and 1-node prefill replicas (16 chips each),
    autoscaled (the cases hand them their autoscalers' decisions)."""
    ie = endpoint(roles={
        "decode": {"replicaShape": {"workers": 2, "acceleratorsPerWorker": 16},
                   "scaling": SCALING, **(decode or {})},
        "prefill": {"replicaShape": {"workers": 1, "acceleratorsPerWorker": 16},
                    "scaling": SCALING, **(prefill or {})}, **more})
    del ie["spec"]["replicaShape"]
    return ie


def running(ie: Obj, role: str, index: int, *nodes: str) -> list[Obj]:
    """Group INDEX of ROLE running on NODES (us1-n0 is in UltraServer us-1)."""
    spec = InferenceEndpointSpec.model_validate(ie["spec"])
    serving = next(r for r in spec.serving_roles() if r.name == role)
    pods = build.group_pods(ie, spec, index, build.revision(ie["spec"], role), TRN2, serving)
    for pod, node in zip(pods, nodes, strict=True):
        pod["metadata"]["resourceVersion"] = "1"
        pod["spec"]["schedulingGates"] = []
        pod["spec"]["nodeName"] = node
        pod["metadata"]["annotations"][names.DOMAIN_ANNOTATION] = \
            "us-" + node.split("-")[0].removeprefix("us")
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready",
                                                             "status": "True"}]}
    return pods


def sized(role: str, desired: int, current: int) -> Obj:
    return {("ns", "ie", role): Scaled(Decision(desired, "by its signal", {}), current,
                                       NOW - 1)}


def short(pod_name: str) -> str:
    """ie-decode-0-48a3c-1 -> decode-0-1: role, group, member."""
    return re.sub(r"^ie-|-[0-9a-f]{5}(?=-\d+$)", "", pod_name)


def decided(ie: Obj, pods: list[Obj], scaled: Obj | None = None) -> EndpointDecision:
    snapshot = world(None, pods=pods, endpoints=[ie], scaled=scaled or {})
    with trial(snapshot):
        [decision] = decide_endpoints(snapshot, [])
    InferenceEndpointStatus.model_validate({**decision.status, **decision.desired})
    return decision


def created(decision: EndpointDecision) -> dict[str, str | None]:
    return {short(p["metadata"]["name"]): (p["metadata"].get("annotations") or {}).get(
        names.NODE_ANNOTATION) for p in decision.create}


@dataclass
class Case:
    id: str
    endpoint: Obj
    expect: dict[str, Any]
    pods: list[Obj] = field(default_factory=list)
    scaled: Obj = field(default_factory=dict)


IE = roles()
UNIT_0 = running(IE, "decode", 0, "us0-n0", "us0-n1") + running(IE, "prefill", 0, "us0-n2")
UNIT_1 = running(IE, "decode", 1, "us1-n0", "us1-n1") + running(IE, "prefill", 1, "us1-n2")
CASES = [
    Case("a new endpoint's first unit: a decode and a prefill replica in one UltraServer, "
         "created pinned",
         IE, {"created": {"decode-0-0": "us0-n0", "decode-0-1": "us0-n1",
                          "prefill-0-0": "us0-n2"}, "delete": []}),
    Case("a second decode replica the unit has no room for opens a unit of its own, where "
         "a prefill replica fits beside it",
         IE, {"created": {"decode-1-0": "us1-n0", "decode-1-1": "us1-n1"},
              "desired": {"decode": 2, "prefill": 1}},
         pods=UNIT_0, scaled=sized("decode", 2, 1)),
    Case("then the new unit gets its prefill replica: one in every unit, whatever the "
         "prefill pool's own size",
         IE, {"created": {"prefill-1-0": "us1-n2"}, "desired": {"decode": 2, "prefill": 2},
              "limited": "prefill held at 2: one in each of the 2 serving units",
              "units": [("us-0", [0], [0]), ("us-1", [1], [])]},
         pods=UNIT_0 + running(IE, "decode", 1, "us1-n0", "us1-n1"),
         scaled=sized("decode", 2, 2)),
    Case("a new prefill replica joins the unit where prefill is scarcest beside decode",
         IE, {"created": {"prefill-2-0": "us1-n3"}},
         pods=UNIT_0 + running(IE, "prefill", 3, "us0-n3") + UNIT_1,
         scaled=sized("decode", 2, 2) | sized("prefill", 4, 3)),
    Case("prefillPerDecode bounds the prefill pool by the decode pool",
         roles(prefillPerDecode={"max": 1}),
         {"created": {}, "desired": {"decode": 1, "prefill": 1},
          "limited": "prefill held at 1: at most 1 per decode replica (1)"},
         pods=UNIT_0, scaled=sized("prefill", 3, 1)),
    Case("scaling prefill down never takes a unit's last prefill replica",
         IE, {"delete": ["prefill-3-0"], "desired": {"decode": 2, "prefill": 2}},
         pods=UNIT_0 + running(IE, "prefill", 3, "us0-n3") + UNIT_1,
         scaled=sized("decode", 2, 2) | sized("prefill", 1, 3)),
    Case("scaling decode down empties the unit where decode is most plentiful beside "
         "prefill; its prefill replica goes, and the prefill pool follows the units",
         IE, {"delete": ["decode-0-0", "decode-0-1", "prefill-0-0", "prefill-2-0"],
              "events": ["GroupMoved", "Scaled"], "desired": {"decode": 1, "prefill": 1}},
         pods=UNIT_0 + UNIT_1 + running(IE, "prefill", 2, "us1-n3"),
         scaled=sized("decode", 1, 2)),
    Case("a prefill replica whose unit lost its decode replicas moves to a unit",
         IE, {"delete": ["prefill-0-0"], "created": {"prefill-2-0": "us1-n3"},
              "events": ["GroupMoved", "Placed"]},
         pods=running(IE, "prefill", 0, "us0-n2") + UNIT_1, scaled=sized("prefill", 2, 2)),
    Case("a decode replica restarting comes back to its unit's prefill replica",
         IE, {"created": {"decode-0-0": "us0-n0", "decode-0-1": "us0-n1"}, "delete": []},
         pods=running(IE, "prefill", 0, "us0-n2") + running(IE, "decode", 5, "us1-n0",
                                                             "us1-n1")
         + running(IE, "prefill", 5, "us1-n2"),
         scaled=sized("decode", 2, 2)),
    Case("with NetworkBlock affinity a unit spans the block: prefill beside a decode "
         "replica that fills its UltraServer",
         roles({"replicaShape": {"workers": 4, "acceleratorsPerWorker": 16}},
               affinity="NetworkBlock"),
         {"created": {"decode-0-0": "us0-n0", "decode-0-1": "us0-n1",
                      "decode-0-2": "us0-n2", "decode-0-3": "us0-n3",
                      "prefill-0-0": "us1-n0"}}),
    Case("with Domain affinity the same endpoint has no unit: both roles wait, with no pods",
         roles({"replicaShape": {"workers": 4, "acceleratorsPerWorker": 16}}),
         {"created": {},
          "limited": "holds a decode replica and a prefill replica together"}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_disaggregated_endpoint_pass(case: Case) -> None:
    decision = decided(case.endpoint, case.pods, case.scaled)
    found = {
        "created": created(decision),
        "delete": sorted(map(short, decision.delete)),
        "events": [e.reason for e in decision.events],
        "desired": {r["name"]: r["desiredReplicas"] for r in decision.desired["roles"]},
        "limited": "; ".join(c["message"] for c in decision.desired["conditions"]
                             if c["type"] == "ScalingLimited"),
        "units": [(u["scope"], u["decode"], u["prefill"]) for u in decision.desired["units"]],
    }
    for key, want in case.expect.items():
        if key == "limited":
            assert want in found[key], found
        else:
            assert found[key] == want, found


def test_the_service_and_the_selector_name_the_decode_leaders() -> None:
    decision = decided(IE, UNIT_0)
    [service, _] = decision.services
    assert service["spec"]["selector"] == {names.ENDPOINT_LABEL: "ie", names.ROLE_LABEL: "leader",
                                           names.SERVING_ROLE_LABEL: "decode"}
    assert decision.desired["selector"] == (f"{names.ENDPOINT_LABEL}=ie,"
                                            f"{names.ROLE_LABEL}=leader,"
                                            f"{names.SERVING_ROLE_LABEL}=decode")
    assert conditions(decision.desired)["Ready"] == ("True", "ReplicasReady")


def test_a_roles_own_template_and_its_environment() -> None:
    ie = roles(prefill={"template": {"spec": {"containers": [{"name": "p",
                                                              "image": "prefill:1"}]}}})
    spec = InferenceEndpointSpec.model_validate(ie["spec"])
    decode, prefill = spec.serving_roles()
    [pod] = build.group_pods(ie, spec, 0, "r", TRN2, prefill)
    assert pod["spec"]["containers"][0]["image"] == "prefill:1"
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env[names.ENV_SERVING_ROLE] == "prefill"
    assert env["GOODPUT_LEADER_ADDRESS"] == "ie-prefill-0-0.ie-members.ns.svc"
    leader = build.group_pods(ie, spec, 0, "r", TRN2, decode)[0]
    assert leader["spec"]["containers"][0]["image"] == "i"          # spec.template's
    assert build.revision(ie["spec"], "prefill") != build.revision(ie["spec"], "decode")


@pytest.mark.parametrize(("prefill", "decode", "units", "bound", "want"), [
    (3, 2, 1, None, (3, "")),
    (1, 2, 3, None, (3, "one in each of the 3 serving units")),
    (1, 4, 1, RatioBound(min=0.5), (2, "at least 0.5 per decode replica (4)")),
    (9, 4, 1, RatioBound(max=1.5), (6, "at most 1.5 per decode replica (4)")),
    (3, 1, 2, RatioBound(max=1), (2, "one in each of the 2 serving units")),
    (1, 3, 1, RatioBound(min=1 / 3), (1, "")),           # no float rounding past a whole
])
def test_the_prefill_pools_size(prefill: int, decode: int, units: int,
                                bound: RatioBound | None, want: tuple[int, str]) -> None:
    assert prefill_wanted(prefill, decode, units, bound) == want


def test_removal_takes_unplaced_groups_then_orphans_then_the_most_plentiful_units() -> None:
    units = Units.of({"decode": {0: "a", 1: "b"},
                      "prefill": {0: "a", 1: "a", 2: "b", 3: "c", 4: None}})
    assert removal_order("prefill", {0: "a", 1: "a", 2: "b", 3: "c", 4: None}, units, 4) \
        == [4, 3, 1, 0]   # unplaced, orphan, a's second, then a unit's last
    assert removal_order("decode", {0: "a", 1: "b"}, units, 1) == [1]   # b: 1 beside 1


@pytest.mark.parametrize(("pods", "role", "room"), [
    ([], "decode", 2),             # a unit in each UltraServer: 2 decode + 1 prefill nodes
    (UNIT_0, "decode", 1),         # us-0 has one node left: only a new unit in us-1
    (UNIT_0, "prefill", 1),        # prefill only joins a unit: us-0's last node
    (UNIT_0 + UNIT_1, "decode", 0),
    (UNIT_0 + UNIT_1, "prefill", 2),
])
def test_the_autoscalers_room_counts_a_unit_as_one_request(pods: list[Obj], role: str,
                                                          room: int) -> None:
    snapshot = world(None, pods=pods)
    spec = InferenceEndpointSpec.model_validate(IE["spec"])
    requests = {r.name: request_of(r.shape) for r in spec.serving_roles()}
    [serving] = [r for r in spec.serving_roles() if r.name == role]
    fleet = snapshot.fleets["trn2"]
    before = fleet.snapshot()
    assert room_for_role(fleet, spec, serving, pods, requests, 8) == room
    assert fleet.snapshot() == before                      # nothing left reserved
