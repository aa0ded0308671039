"""What Kueue TAS is given for a head-to-head (sandbox/peers.py): the group's topology as
TAS levels, a flavor and queues over the same nodes, and gangs annotated as a
TrainingJob's topology asks; checked against Kueue's own rules, and against its CRDs'
schemas where Kueue v0.17 is built here."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from goodput_operator.sandbox import build, peers
from goodput_operator.sandbox.cluster import KEEP_RUNNING
from goodput_operator.sandbox.versions import KUEUE_COMPONENT
from tests.unit.world import group_spec

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
L1, L2 = "topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2"


def by_kind(objects: list[Obj]) -> dict[str, Obj]:
    return {o["kind"]: o for o in objects}


def test_the_topology_is_the_groups_levels_then_its_domain_then_the_hostname() -> None:
    spec = group_spec()
    objects = by_kind(peers.tas_objects("trn2", spec, nodes=128, namespace="bench"))
    levels = [lv["nodeLabel"] for lv in objects["Topology"]["spec"]["levels"]]
    assert levels == [L1, L2, spec.domain_key, peers.HOSTNAME]
    assert len(set(levels)) == len(levels) <= 16  # Kueue: unique, at most 16, host last
    flavor = objects["ResourceFlavor"]["spec"]
    assert flavor == {"nodeLabels": {"pool": "trn2"}, "topologyName": "trn2"}
    [group] = objects["ClusterQueue"]["spec"]["resourceGroups"]
    assert group["coveredResources"] == [spec.accelerator.resource]
    assert group["flavors"] == [{"name": "trn2", "resources": [
        {"name": spec.accelerator.resource, "nominalQuota": 128 * 16}]}]
    assert objects["LocalQueue"]["metadata"]["namespace"] == "bench"
    assert objects["LocalQueue"]["spec"] == {"clusterQueue": "trn2"}


@pytest.mark.parametrize(("unit", "policy", "slice_size", "annotations"), [
    ("domain", "required", 1, {peers.REQUIRED: "DOMAIN"}),
    ("block", "required", 1, {peers.REQUIRED: L2}),
    ("block", "preferred", 1, {peers.PREFERRED: L2}),
    ("node", "required", 1, {peers.REQUIRED: peers.HOSTNAME}),
    ("block", "required", 4, {peers.REQUIRED: L2, peers.SLICE_REQUIRED: "DOMAIN",
                              peers.SLICE_SIZE: "4"}),
])
def test_a_gang_asks_tas_for_the_level_its_topology_names(
        unit: peers.Unit, policy: Any, slice_size: int, annotations: dict[str, str]) -> None:
    spec = group_spec()
    job = peers.tas_gang("g", "bench", "trn2", spec, 16, 16, unit, policy, slice_size)
    expected = {k: spec.domain_key if v == "DOMAIN" else v for k, v in annotations.items()}
    template = job["spec"]["template"]
    assert template["metadata"]["annotations"] == expected
    # Kueue's rules: an annotated level is a level of the flavor's Topology; the job is
    # queued, suspended until admitted, Indexed, and asks only what the queue covers
    assert set(expected.values()) - {"4"} <= set(peers.tas_levels(spec))
    assert job["metadata"]["labels"] == {peers.QUEUE_LABEL: "trn2"}
    assert job["spec"]["suspend"] is True and job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 16
    [container] = template["spec"]["containers"]
    assert set(container["resources"]["requests"]) == {spec.accelerator.resource}


def test_a_group_without_network_levels_has_blocks_of_one_domain() -> None:
    spec = group_spec(networkLevels=[])
    assert peers.tas_levels(spec) == [spec.domain_key, peers.HOSTNAME]
    assert peers.tas_level(spec, "block") == spec.domain_key


def schema_keys(schema: Obj, value: Any, path: str) -> list[str]:
    """The keys of VALUE that SCHEMA (OpenAPI v3) does not know, by path."""
    unknown: list[str] = []
    if isinstance(value, dict) and "properties" in schema:
        for key, item in value.items():
            if key not in schema["properties"]:
                unknown.append(f"{path}.{key}")
            else:
                unknown += schema_keys(schema["properties"][key], item, f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for item in value:
            unknown += schema_keys(schema["items"], item, f"{path}[]")
    return unknown


def test_every_field_given_to_kueue_is_one_its_crds_know() -> None:
    if not build.is_built(KUEUE_COMPONENT):
        pytest.skip("Kueue not built here")
    bases = build.module_dir(KUEUE_COMPONENT) / "config" / "components" / "crd" / "bases"
    for obj in peers.tas_objects("trn2", group_spec(), nodes=8, namespace="bench"):
        plural = {"Topology": "topologies", "ResourceFlavor": "resourceflavors",
                  "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues"}[obj["kind"]]
        crd = yaml.safe_load((bases / f"kueue.x-k8s.io_{plural}.yaml").read_text())
        [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2"]
        schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        assert schema_keys(schema, obj["spec"], obj["kind"]) == [], obj["kind"]


@pytest.mark.parametrize(("workers", "unit", "key"), [
    (4, "domain", "topology.k8s.aws/ultraserver-id"),
    (8, "block", "topology.k8s.aws/network-node-layer-2"),
    (1, "node", "kubernetes.io/hostname"),
])
def test_an_upstream_gang_is_a_podgroup_of_all_its_pods_inside_one_unit(
        workers: int, unit: peers.Unit, key: str) -> None:
    spec = group_spec()
    group, *pods = peers.upstream_gang("g", "bench", spec, workers, 16, unit)
    assert (group["apiVersion"], group["kind"]) == ("scheduling.k8s.io/v1alpha2", "PodGroup")
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": workers}},
                             "schedulingConstraints": {"topology": [{"key": key}]}}
    assert len(pods) == workers
    for pod in pods:
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "g"}
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {
            spec.accelerator.resource: "16"}
        assert pod["metadata"]["labels"][KEEP_RUNNING] == "true"
