"""The sandbox's simulated NVIDIA DRA driver: what it publishes for GB200 nodes, the
channel template it makes for a ComputeDomain, and the domain's status from its claims."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator.resources.computedomain import compute_domain
from goodput_operator.sandbox import drivers, fleet

pytestmark = pytest.mark.unit


def test_gb200_nodes_publish_a_channel_per_gpu_and_trainium_nodes_their_devices() -> None:
    nodes = fleet.nodes(fleet.load("mixed"))
    published = drivers.objects(nodes)
    crd, device_class, *rest = published
    assert crd["metadata"]["name"] == "computedomains.resource.nvidia.com"
    assert device_class["metadata"]["name"] == drivers.CHANNEL_CLASS
    slices = [o for o in rest if o["kind"] == "ResourceSlice"]
    channels = [s["spec"] for s in slices if s["spec"]["driver"] == drivers.DRIVER]
    gb200 = [n for n in nodes if drivers.CLIQUE_LABEL in n["metadata"]["labels"]]
    assert len(channels) == len(gb200) == 18
    assert channels[0]["nodeName"] == channels[0]["pool"]["name"]
    assert [d["name"] for d in channels[0]["devices"]] == [f"channel-{i}" for i in range(4)]
    neurons = [s["spec"] for s in slices if s["spec"]["driver"] == drivers.NEURON_DRIVER]
    assert len(neurons) == 8 and all(len(s["devices"]) == 16 for s in neurons)
    gpus = [s["spec"] for s in slices if s["spec"]["driver"] == drivers.GPU_DRIVER]
    assert sorted(len(s["devices"]) for s in gpus) == [4] * 18 + [8] * 4  # GB200s, p5s
    assert sorted(o["metadata"]["name"] for o in rest if o["kind"] == "DeviceClass") == [
        drivers.GPU_DRIVER, drivers.NEURON_DRIVER]
    p5 = drivers.objects(fleet.nodes(fleet.load("p5")))
    assert {o["spec"].get("driver") for o in p5 if o["kind"] == "ResourceSlice"} == {
        drivers.GPU_DRIVER}                              # no NVLink across p5 nodes


def domain() -> dict[str, Any]:
    made = compute_domain("ns", "moe-imex", {}, {"uid": "job-uid"})
    made["metadata"]["uid"] = "cd-uid"
    return made


def claim(domain_id: str, node: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"spec": {"devices": {"config": [{"opaque": {
        "driver": drivers.DRIVER, "parameters": {"domainID": domain_id}}}]}}}
    if node:
        body["status"] = {"allocation": {"nodeSelector": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
    return body


def test_the_channel_template_is_named_by_the_domain_and_carries_its_id() -> None:
    template = drivers.channel_template(domain())
    assert template["metadata"]["name"] == "moe-imex-channel"
    assert template["metadata"]["ownerReferences"][0]["uid"] == "cd-uid"
    assert drivers.domain_of(template["spec"]) == "cd-uid"
    [request] = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == drivers.CHANNEL_CLASS


@pytest.mark.parametrize(("claims", "status", "nodes"), [
    ([], "NotReady", []),
    ([claim("cd-uid", None)], "NotReady", []),                 # not allocated yet
    ([claim("cd-uid", "gb-1"), claim("cd-uid", "gb-0")], "Ready", ["gb-0", "gb-1"]),
    ([claim("other", "gb-2"), claim("cd-uid", "gb-0")], "Ready", ["gb-0"]),
    ([claim("cd-uid", "gb-0"), claim("cd-uid", "gb-0")], "Ready", ["gb-0"]),  # two pods
])
def test_a_domains_nodes_are_those_its_claims_were_allocated_on(
        claims: list[dict[str, Any]], status: str, nodes: list[str]) -> None:
    found = drivers.domain_status(domain(), claims, {"gb-0": "c.0", "gb-1": "c.0"})
    assert found["status"] == status and [n["name"] for n in found["nodes"]] == nodes
    assert [n["index"] for n in found["nodes"]] == list(range(len(nodes)))
