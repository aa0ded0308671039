"""Fleets as data: every built-in fleet is shaped and labelled as the providers do."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from goodput_operator.sandbox import fleet

pytestmark = pytest.mark.unit


def _alloc(node: dict, resource: str) -> str | None:
    return node["status"]["allocatable"].get(resource)


@pytest.mark.parametrize(
    ("name", "nodes", "resource", "per_node", "domain_label", "domain_sizes"),
    [
        ("trn2", 16, "aws.amazon.com/neuron", "16", fleet.ULTRASERVER_LABEL, [4, 4, 4, 4]),
        ("p5", 16, "nvidia.com/gpu", "8", None, None),
        ("nvl72", 36, "nvidia.com/gpu", "4", fleet.GPU_CLIQUE_LABEL, [18, 18]),
        # no provider labels the network: topograph's leaf (block) is the domain
        ("ndv5", 8, "nvidia.com/gpu", "8", fleet.TOPOGRAPH_LABELS[-1], [4, 4]),
        ("roce", 8, "nvidia.com/gpu", "8", fleet.TOPOGRAPH_LABELS[-1], [4, 4]),
        ("tpu", 20, "google.com/tpu", "4", fleet.GKE_NODEPOOL_LABEL, [4] * 5),  # slices
    ],
)
def test_builtin_fleet_shape(name: str, nodes: int, resource: str, per_node: str,
                             domain_label: str | None, domain_sizes: list[int] | None) -> None:
    loaded = fleet.load(name)
    pools = {pool.name: pool for pool in loaded.spec.pools}
    generated = fleet.nodes(loaded)
    assert len(generated) == nodes
    assert all(_alloc(n, resource) == per_node for n in generated)
    assert all(n["metadata"]["annotations"][fleet.KWOK_ANNOTATION] == "fake" for n in generated)
    for node in generated:
        labels = node["metadata"]["labels"]
        pool = pools[labels[fleet.POOL_LABEL]]
        for key in (*pool.layer_labels, fleet.INSTANCE_TYPE_LABEL, fleet.ZONE_LABEL):
            assert labels[key], key
    if domain_label:
        sizes = Counter(n["metadata"]["labels"][domain_label] for n in generated)
        assert sorted(sizes.values()) == domain_sizes
    else:
        assert not any(fleet.ULTRASERVER_LABEL in n["metadata"]["labels"] for n in generated)


def test_p6e_ultraservers_carry_ekss_label_and_may_hold_several_cliques() -> None:
    """x72: one clique of 18; x36: one of 9; a split x72: two cliques of 9 in one
    UltraServer, sharing its NVLink fabric's cluster UUID."""
    generated = fleet.nodes(fleet.load("p6"))
    by_pool: dict[str, Counter[tuple[str, str]]] = {}
    for node in generated:
        labels = node["metadata"]["labels"]
        if "gb200" in labels[fleet.POOL_LABEL]:
            by_pool.setdefault(labels[fleet.POOL_LABEL], Counter())[
                (labels[fleet.ULTRASERVER_LABEL], labels[fleet.GPU_CLIQUE_LABEL])] += 1
        else:
            assert fleet.ULTRASERVER_LABEL not in labels and _alloc(node, "nvidia.com/gpu") == "8"
    assert sorted(by_pool["gb200x72"].values()) == [18, 18]
    assert len({u for u, _ in by_pool["gb200x72"]}) == 2
    assert sorted(by_pool["gb200x36"].values()) == [9, 9]
    split = by_pool["gb200split"]
    assert sorted(split.values()) == [9, 9] and len({u for u, _ in split}) == 1
    assert len({c.split(".")[0] for _, c in split}) == 1  # one fabric, cliques .0 and .1
    assert sorted(c.split(".")[1] for _, c in split) == ["0", "1"]


def test_trn2_nodes_carry_eks_capacity() -> None:
    node = fleet.nodes(fleet.load("trn2"))[0]
    assert node["metadata"]["labels"][fleet.INSTANCE_TYPE_LABEL] == "trn2u.48xlarge"
    assert _alloc(node, "aws.amazon.com/neuroncore") == "128"
    assert _alloc(node, "vpc.amazonaws.com/efa") == "16"


def test_p5_is_two_network_blocks() -> None:
    generated = fleet.nodes(fleet.load("p5"))
    blocks = {n["metadata"]["labels"][fleet.NETWORK_LAYER_LABELS[1]] for n in generated}
    spines = {n["metadata"]["labels"][fleet.NETWORK_LAYER_LABELS[0]] for n in generated}
    assert len(blocks) == 2
    assert len(spines) == 1
    assert all(_alloc(n, "vpc.amazonaws.com/efa") == "32" for n in generated)


def test_nodes_of_one_domain_share_their_leaf_switch() -> None:
    generated = fleet.nodes(fleet.load("trn2"))
    by_domain: dict[str, set[str]] = {}
    for node in generated:
        labels = node["metadata"]["labels"]
        by_domain.setdefault(labels[fleet.ULTRASERVER_LABEL], set()).add(
            labels[fleet.NETWORK_LAYER_LABELS[2]])
    assert all(len(leaves) == 1 for leaves in by_domain.values())
    assert len({leaf for leaves in by_domain.values() for leaf in leaves}) == 4


def test_mixed_is_the_default_and_has_each_kind() -> None:
    default = fleet.load()
    assert default.name == "mixed"
    types = {p.instance_type for p in default.spec.pools}
    assert types == {"trn2u.48xlarge", "p5.48xlarge", "p6e-gb200.36xlarge"}


def test_node_names_are_unique_and_stable() -> None:
    first = [n["metadata"]["name"] for n in fleet.nodes(fleet.load("mixed"))]
    second = [n["metadata"]["name"] for n in fleet.nodes(fleet.load("mixed"))]
    assert first == second
    assert len(set(first)) == len(first)


def test_synthetic_fleet_scales_domains() -> None:
    big = fleet.load("synthetic:trn2:256")
    generated = fleet.nodes(big)
    assert len(generated) == 1024
    assert len({n["metadata"]["labels"][fleet.ULTRASERVER_LABEL] for n in generated}) == 256
    assert len({n["metadata"]["labels"][fleet.NETWORK_LAYER_LABELS[1]] for n in generated}) == 16
    assert generated[0]["metadata"]["name"] == "trn2-000-0"


def test_a_fleet_file_scales_too_the_planner_s_trn3_gen2_shape() -> None:
    path = Path(__file__).resolve().parents[2] / "bench" / "fleets" / "trn3-gen2.yaml"
    big = fleet.load(f"synthetic:{path}:3")
    generated = fleet.nodes(big)
    assert big.name == "synthetic-trn3-gen2-3" and len(generated) == 3 * 36
    assert {n["status"]["allocatable"]["aws.amazon.com/neuron"] for n in generated} == {"4"}
    with pytest.raises(fleet.FleetError, match="or a fleet file"):
        fleet.load("synthetic:no-such-file.yaml:3")


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("nope", "unknown fleet 'nope'"),
        ("synthetic:tpu:4", "bad synthetic fleet"),
        ("synthetic:trn2:0", "bad synthetic fleet"),
        ("synthetic:trn2", "bad synthetic fleet"),
        ("/does/not/exist.yaml", "does not exist"),
    ],
)
def test_bad_fleet_references_are_named(ref: str, message: str) -> None:
    with pytest.raises(fleet.FleetError, match=message):
        fleet.load(ref)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [unclosed", "not valid YAML"),
        ("- just\n- a list\n", "must be a YAML mapping"),
        ("apiVersion: sandbox.goodput.dev/v1alpha1\nkind: SimulatedFleet\n"
         "metadata: {name: x}\nspec: {pools: []}\n", "spec.pools"),
        ("apiVersion: sandbox.goodput.dev/v1alpha1\nkind: SimulatedFleet\nmetadata: {name: x}\n"
         "spec:\n  pools:\n  - {name: a, instanceType: t, domains: 0, nodesPerDomain: 1, "
         "capacity: {cpu: 1}}\n", "spec.pools.0.domains"),
        ("apiVersion: sandbox.goodput.dev/v1alpha1\nkind: SimulatedFleet\nmetadata: {name: x}\n"
         "spec:\n  pools:\n  - {name: a, instanceType: t, domains: 1, nodesPerDomain: 1, "
         "capacity: {nvidia.com/gpu: lots}}\n", "not a Kubernetes quantity"),
        ("apiVersion: sandbox.goodput.dev/v1alpha1\nkind: SimulatedFleet\nmetadata: {name: x}\n"
         "spec:\n  pools:\n  - {name: a, instanceType: t, domains: 1, nodesPerDomain: 1, "
         "capacity: {cpu: 1}, gpus: 3}\n", "spec.pools.0.gpus"),
        ("apiVersion: sandbox.goodput.dev/v1alpha1\nkind: SimulatedFleet\nmetadata: {name: x}\n"
         "spec:\n  pools:\n  - {name: a, instanceType: t, domains: 3, nodesPerDomain: 9, "
         "ultraServerNodes: 18, capacity: {cpu: 1}}\n", "whole UltraServers"),
        ("apiVersion: sandbox.goodput.dev/v1alpha1\nkind: SimulatedFleet\nmetadata: {name: x}\n"
         "spec:\n  pools:\n  - {name: a, instanceType: t, domains: 1, nodesPerDomain: 1, "
         "capacity: {cpu: 1}}\n  - {name: a, instanceType: t, domains: 1, nodesPerDomain: 1, "
         "capacity: {cpu: 1}}\n", "repeated: a"),
    ],
)
def test_malformed_fleet_files_say_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    with pytest.raises(fleet.FleetError, match=message) as caught:
        fleet.load(str(path))
    assert str(path) in str(caught.value)


def test_examples_fleets_are_the_builtin_ones() -> None:
    examples = Path(__file__).resolve().parents[2] / "examples" / "fleets"
    assert sorted(p.stem for p in examples.glob("*.yaml")) == fleet.builtin_names()
    for path in examples.glob("*.yaml"):
        assert fleet.load(str(path)).name == path.stem
