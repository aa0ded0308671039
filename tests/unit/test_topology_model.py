"""The fleet model: built from nodes and pods, kept current incrementally."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goodput_operator import names
from goodput_operator.topology.model import Fleet, GroupShape, node_state
from tests.unit.fleets import US, node, trn2

pytestmark = pytest.mark.unit


def test_domains_and_slots_follow_labels_and_natural_name_order() -> None:
    shape = GroupShape(US, 4, 16)
    names = ["n-10", "n-9", "n-2", "n-1"]
    fleet = Fleet.from_objects(shape, [node(n, "us-a") for n in names])
    assert [n.name for n in fleet.domains["us-a"].nodes] == ["n-1", "n-2", "n-9", "n-10"]
    assert [n.slot for n in fleet.domains["us-a"].nodes] == [0, 1, 2, 3]


def test_slots_can_come_from_a_label() -> None:
    shape = GroupShape(US, 2, 16, slot_label="example.com/slot")
    nodes = [node("a", "d", labels={"example.com/slot": "1"}),
             node("b", "d", labels={"example.com/slot": "0"})]
    fleet = Fleet.from_objects(shape, nodes)
    assert [n.name for n in fleet.domains["d"].nodes] == ["b", "a"]


@pytest.mark.parametrize(
    ("spec", "conditions", "expected"),
    [
        ({}, [{"type": "Ready", "status": "True"}], "ready"),
        ({}, [{"type": "Ready", "status": "False"}], "notready"),
        ({}, [{"type": "Ready", "status": "Unknown"}], "notready"),
        ({}, [], "notready"),
        ({"unschedulable": True}, [{"type": "Ready", "status": "True"}], "cordoned"),
        ({"taints": [{"key": names.QUARANTINE_TAINT, "effect": "NoSchedule"}]},
         [{"type": "Ready", "status": "True"}], "quarantined"),
    ],
)
def test_node_state(spec: dict, conditions: list, expected: str) -> None:
    assert node_state({"spec": spec, "status": {"conditions": conditions}}) == expected


def test_a_node_with_fewer_accelerators_than_declared_is_misshaped() -> None:
    fleet = Fleet.from_objects(GroupShape(US, 1, 16), [node("n", "d", accelerators=12)])
    assert fleet.nodes["n"].state == "misshaped"
    assert fleet.nodes["n"].free == 0


def test_nodes_without_the_domain_label_are_not_in_the_group() -> None:
    fleet = trn2(1)
    unlabeled = node("stray", "x")
    del unlabeled["metadata"]["labels"][US]
    fleet.upsert_node(unlabeled)
    assert "stray" not in fleet.nodes


def test_spares_are_the_highest_empty_healthy_slots() -> None:
    fleet = trn2(2, spares=1)
    assert [n.name for n in fleet.nodes.values() if n.spare] == ["us0-n3", "us1-n3"]
    fleet.upsert_node(node("us0-n3", "us-0", ready=False))
    assert fleet.nodes["us0-n2"].spare and not fleet.nodes["us0-n3"].spare


@settings(max_examples=100)
@given(st.permutations([f"us{d}-n{s}" for d in range(3) for s in range(4)]),
       st.integers(0, 6))
def test_the_groups_spares_are_its_last_nodes_whatever_order_they_join_in(
        order: list[str], wanted: int) -> None:
    """spares.perGroup: the last nodes in fabric order, whether the fleet is built at once
    or its nodes join one by one (start-up), leave and come back."""
    whole = trn2(3, group_spares=wanted)
    expected = sorted(sorted(whole.nodes, key=lambda n: (n[2], int(n[-1])))[12 - wanted:])
    assert sorted(n.name for n in whole.nodes.values() if n.spare) == expected
    joined = Fleet(whole.shape)
    bodies = {name: node(name, f"us-{name[2]}", f"b{int(name[2]) // 2}") for name in order}
    for name in order:
        joined.upsert_node(bodies[name])
    assert joined.snapshot() == whole.snapshot()
    joined.remove_node(order[0])
    joined.upsert_node(bodies[order[0]])
    assert joined.snapshot() == whole.snapshot()


def test_a_group_spare_that_takes_a_pod_is_not_spare_until_it_is_free_again() -> None:
    fleet = trn2(2, group_spares=2)
    assert fleet.nodes["us1-n3"].spare and fleet.nodes["us1-n2"].spare
    fleet.bind("ns/p", "us1-n3", 16, "tj/ns/p")
    assert not fleet.nodes["us1-n3"].spare and fleet.nodes["us1-n2"].spare
    assert not fleet.nodes["us1-n1"].spare           # the group's spares do not wander
    fleet.release("ns/p")
    assert fleet.nodes["us1-n3"].spare


def test_a_spare_that_takes_a_replacement_stops_being_spare() -> None:
    fleet = trn2(1, spares=1)
    fleet.bind("ns/w", "us0-n3", 16, "tj/ns/job")
    assert not fleet.nodes["us0-n3"].spare
    assert fleet.nodes["us0-n2"].spare


def test_pods_count_while_bound_and_not_finished() -> None:
    fleet = trn2(1)
    pod = {"metadata": {"name": "w0", "namespace": "ns",
                        "labels": {names.JOB_LABEL: "job"}},
           "spec": {"nodeName": "us0-n0", "containers": [
               {"resources": {"requests": {"aws.amazon.com/neuron": "16"}}}]},
           "status": {"phase": "Running"}}
    fleet.observe_pod(pod)
    assert fleet.nodes["us0-n0"].used == 16
    assert fleet.domains["us-0"].owners() == {"tj/ns/job"}
    fleet.observe_pod({**pod, "status": {"phase": "Succeeded"}})
    assert fleet.nodes["us0-n0"].used == 0


@pytest.mark.parametrize(("interconnect", "label"), [
    ("neuronlink", "topology.k8s.aws/ultraserver-id"),
    ("nvlink", "nvidia.com/gpu.clique"),
    ("efa-only", "topology.k8s.aws/network-node-layer-3"),
])
def test_the_interconnect_says_which_label_names_a_domain_unless_domain_label_does(
        interconnect: str, label: str) -> None:
    from goodput_operator.api.ultraservergroup import UltraServerGroupSpec

    spec = {"nodeSelector": {"pool": "x"}, "accelerator": {"perNode": 8},
            "nodesPerDomain": 4, "interconnect": interconnect}
    assert GroupShape.from_spec(UltraServerGroupSpec.model_validate(spec)).domain_label == label
    spec["domainLabel"] = "example.com/rack"
    assert GroupShape.from_spec(UltraServerGroupSpec.model_validate(spec)).domain_label == \
        "example.com/rack"


@pytest.mark.parametrize("group_spares", [0, 2, 5])
def test_incremental_updates_match_a_rebuild(group_spares: int) -> None:
    fleet = trn2(2, group_spares=group_spares)
    fleet.bind("ns/a", "us0-n1", 16, "tj/ns/a")
    fleet.upsert_node(node("us1-n2", "us-1", "b0", ready=False))
    fleet.upsert_node(node("us0-n1", "us-1", "b0"))  # relabelled into another domain
    fleet.remove_node("us1-n0")
    nodes = [node(f"us{d}-n{s}", f"us-{d}", "b0", ready=(d, s) != (1, 2))
             for d in range(2) for s in range(4) if (d, s) not in ((1, 0), (0, 1))]
    nodes.append(node("us0-n1", "us-1", "b0"))
    rebuilt = Fleet.from_objects(fleet.shape, nodes)
    rebuilt.bind("ns/a", "us0-n1", 16, "tj/ns/a")  # the moved node keeps its pod
    assert fleet.snapshot() == rebuilt.snapshot()
    assert fleet.nodes["us0-n1"].domain == "us-1"
    assert [n.name for n in fleet.domains["us-1"].nodes] == \
        [n.name for n in rebuilt.domains["us-1"].nodes]


@pytest.mark.parametrize(
    ("example", "label", "per_domain", "per_node", "noun", "spares"),
    [
        ("trn2", "topology.k8s.aws/ultraserver-id", 4, 16, "UltraServer", (0, 4)),
        ("p5", "topology.k8s.aws/network-node-layer-3", 4, 8, "domain", (0, 1)),
        ("nvl72", "nvidia.com/gpu.clique", 18, 4, "NVLink domain", (2, 0)),
    ],
)
def test_shape_from_each_example_group(example: str, label: str, per_domain: int,
                                       per_node: int, noun: str, spares: tuple[int, int]
                                       ) -> None:
    from pathlib import Path

    import yaml

    from goodput_operator.api.ultraservergroup import UltraServerGroupSpec

    path = Path(__file__).resolve().parents[2] / "examples" / example / "ultraservergroup.yaml"
    spec = UltraServerGroupSpec.model_validate(yaml.safe_load(path.read_text())["spec"])
    shape = GroupShape.from_spec(spec)
    assert (shape.domain_label, shape.nodes_per_domain, shape.accelerators_per_node,
            shape.domain_noun, (shape.spares_per_domain, shape.spares_per_group)) == (
        label, per_domain, per_node, noun, spares)
    assert len(shape.network_levels) == 2


def test_a_heartbeat_does_not_wake_the_operator() -> None:
    import asyncio

    from goodput_operator.controllers.state import State

    async def scenario() -> tuple[bool, bool]:
        state = State()
        body = node("n0", "us-0")
        body["status"]["conditions"][0]["lastHeartbeatTime"] = "t1"
        state.upsert_node(body)
        state.wake.clear()
        beat = node("n0", "us-0")
        beat["status"]["conditions"][0]["lastHeartbeatTime"] = "t2"
        state.upsert_node(beat)
        woke_on_heartbeat = state.wake.is_set()
        state.upsert_node(node("n0", "us-0", ready=False))
        return woke_on_heartbeat, state.wake.is_set()

    heartbeat, failure = asyncio.run(scenario())
    assert (heartbeat, failure) == (False, True)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 11), st.sampled_from(
    [f"us{d}-n{s}" for d in range(2) for s in range(4)]), st.integers(1, 16)), max_size=30),
       st.integers(0, 1), st.sampled_from([0, 1, 4]))
def test_a_trial_leaves_the_fleet_exactly_as_it_found_it(
        steps: list[tuple[bool, int, str, int]], spares: int, group_spares: int) -> None:
    """Whatever a decision reserves and releases inside Fleet.trial(), placements inside
    see it, and afterwards nothing of it remains (spares included)."""
    fleet = trn2(2, spares=spares, group_spares=group_spares)
    fleet.bind("ns/held", "us0-n1", 16, "tj/ns/held")
    before = fleet.snapshot()
    with fleet.trial():
        for bind, key, node, accelerators in steps:
            if bind:
                fleet.bind(f"ns/p{key}", node, accelerators, f"tj/ns/p{key % 3}")
                assert f"ns/p{key}" in fleet.nodes[node].pods
            else:
                fleet.release(f"ns/p{key}" if key else "ns/held")
    assert fleet.snapshot() == before
