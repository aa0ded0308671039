"""The health signals clouds and vendors already emit, each read with its own polarity and
mapped to a failure class (health.signals), and what the quarantine does with them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.api.ultraservergroup import HealthLabel, Quarantine
from goodput_operator.controllers.state import State
from goodput_operator.health import quarantine as q
from goodput_operator.health.signals import device_taints, signal_of

NOW = 1_800_000_000.0
POLICY = Quarantine()
HYPERPOD = "sagemaker.amazonaws.com/node-health-status"


def node(conditions: tuple[tuple[str, str], ...] = (), labels: dict[str, str] | None = None,
         taints: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "resourceVersion": "3", "labels": labels or {},
                     "annotations": {}},
        "spec": {"taints": [{"key": k, "value": "x", "effect": "NoSchedule"} for k in taints]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]
                   + [{"type": t, "status": s, "reason": "DCGMError", "message": "lost",
                       "lastTransitionTime": "2027-01-15T08:00:00Z"} for t, s in conditions]},
    }


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # the EKS node monitoring agent: readiness conditions, False is the failure
        (node((("AcceleratedHardwareReady", "False"),)), ("NodeCondition", "accelerator")),
        (node((("AcceleratedHardwareReady", "True"),)), None),
        (node((("AcceleratedHardwareReady", "Unknown"),)), None),  # the agent says nothing
        (node((("NetworkingReady", "False"),)), ("NodeCondition", "network")),
        (node((("StorageReady", "False"),)), ("NodeCondition", "storage")),
        (node((("KernelReady", "False"),)), ("NodeCondition", "kernel")),
        (node((("ContainerRuntimeReady", "False"),)), ("NodeCondition", "runtime")),
        # problem detectors: True is the failure
        (node((("NeuronHealth", "True"),)), ("NodeCondition", "accelerator")),
        (node((("NeuronHealth", "False"),)), None),
        (node((("GpuHealth", "True"),)), ("NodeCondition", "accelerator")),
        (node((("ReadonlyFilesystem", "True"),)), ("NodeCondition", "storage")),
        (node((("MemoryPressure", "True"),)), None),  # the kubelet's own: not a device fault
        # SageMaker HyperPod's labels
        (node(labels={HYPERPOD: "UnschedulablePendingReplacement"}), ("HealthLabel", "node")),
        (node(labels={HYPERPOD: "UnschedulablePendingReboot"}), ("HealthLabel", "node")),
        (node(labels={HYPERPOD: "Unschedulable"}), ("HealthLabel", "node")),
        (node(labels={HYPERPOD: "Schedulable"}), None),
        (node(labels={"sagemaker.amazonaws.com/deep-health-check-status": "Failed"}),
         ("HealthLabel", "node")),
        (node(labels={"sagemaker.amazonaws.com/deep-health-check-status": "Passed"}), None),
        # another remediator's taint
        (node(taints=(HYPERPOD,)), ("HealthTaint", "node")),
    ],
)
def test_each_signal_is_read_with_its_own_polarity_and_class(
        body: dict[str, Any], expected: tuple[str, str] | None) -> None:
    said = signal_of(body, POLICY)
    assert ((said.reason, said.failure_class) if said else None) == expected


def test_the_evidence_names_the_condition_its_reason_and_the_agent() -> None:
    said = signal_of(node((("AcceleratedHardwareReady", "False"),)), POLICY)
    assert said is not None
    assert said.evidence == ("condition AcceleratedHardwareReady=False (DCGMError: lost; "
                             "accelerator failure; EKS node monitoring agent)")


def test_a_hyperpod_label_carries_its_fault_type_and_reason_as_evidence() -> None:
    said = signal_of(node(labels={HYPERPOD: "UnschedulablePendingReplacement",
                                  "sagemaker.amazonaws.com/fault-type": "NvidiaGpu",
                                  "sagemaker.amazonaws.com/fault-reason": "XidError"}), POLICY)
    assert said is not None and said.evidence == (
        f"label {HYPERPOD}=UnschedulablePendingReplacement (node failure; SageMaker "
        "HyperPod, fault NvidiaGpu: XidError)")


def test_a_group_may_turn_a_signal_off_or_add_its_own() -> None:
    quiet = Quarantine(ready_conditions=[], health_labels=[])
    assert signal_of(node((("AcceleratedHardwareReady", "False"),)), quiet) is None
    assert signal_of(node(labels={HYPERPOD: "Unschedulable"}), quiet) is None
    own = Quarantine(health_labels=[HealthLabel(key="example.com/health", values=["bad"])])
    said = signal_of(node(labels={"example.com/health": "bad"}), own)
    assert said is not None and said.reason == "HealthLabel" and said.failure_class == "node"


def test_the_quarantine_writes_the_class_beside_the_evidence_and_acts_at_once() -> None:
    body = node((("AcceleratedHardwareReady", "False"),))
    decision = q.decide({"n": body, **{f"x{i}": node() for i in range(9)}}, POLICY, NOW,
                        {}, {}, {})
    assert [(n, f.reason, f.failure_class) for n, f in decision.quarantine] == [
        ("n", "NodeCondition", "accelerator")]
    found = decision.quarantine[0][1]
    written = json.loads(q.quarantine_patch(body, found, NOW)["metadata"]["annotations"][
        names.EVIDENCE_ANNOTATION])
    assert written["class"] == "accelerator"
    assert written["evidence"].startswith("condition AcceleratedHardwareReady=False")


def test_a_node_whose_label_says_healthy_again_is_released_after_the_healthy_wait() -> None:
    finding = signal_of(node(labels={HYPERPOD: "UnschedulablePendingReboot"}), POLICY)
    assert finding is not None
    record = q.Finding(finding.reason, finding.evidence, NOW - 2000)
    held = node(labels={HYPERPOD: "Schedulable"})
    patch = q.quarantine_patch(held, record, NOW - 1000)
    held["spec"]["taints"] = patch["spec"]["taints"]
    held["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    released = q.decide({"n": held}, POLICY, NOW, {}, {"n": NOW - 700}, {})
    assert [n for n, _ in released.release] == ["n"]
    still = node(labels={HYPERPOD: "UnschedulablePendingReboot"})
    still["spec"]["taints"] = held["spec"]["taints"]
    still["metadata"]["annotations"] = held["metadata"]["annotations"]
    assert q.decide({"n": still}, POLICY, NOW, {}, {"n": NOW - 700}, {}).release == []


def resource_slice(node: str | None, *taints: tuple[str, str]) -> dict[str, Any]:
    devices = [{"name": f"neuron-device-{i}"} for i in range(3)]
    for key, effect in taints:
        devices[1].setdefault("taints", []).append(
            {"key": key, "value": "ecc", "effect": effect,
             "timeAdded": "2027-01-15T08:00:00Z"})
    return {"metadata": {"name": f"{node}-neuron.aws.com"},
            "spec": {"driver": "neuron.aws.com", "nodeName": node, "devices": devices}}


@pytest.mark.parametrize(("effects", "taints", "quarantined"), [
    (["NoExecute"], [("neuron.aws.com/unhealthy", "NoExecute")], True),
    (["NoExecute"], [("neuron.aws.com/degraded", "NoSchedule")], False),  # not by default
    (["NoSchedule", "NoExecute"], [("neuron.aws.com/degraded", "NoSchedule")], True),
    ([], [("neuron.aws.com/unhealthy", "NoExecute")], False),                # turned off
    (["NoExecute"], [], False),
])
def test_a_tainted_dra_device_takes_its_node_out_by_the_groups_effects(
        effects: list[str], taints: list[tuple[str, str]], quarantined: bool) -> None:
    node_name, found = device_taints(resource_slice("n", *taints))
    assert node_name == "n" and len(found) == len(taints)
    said = signal_of(node(), Quarantine(device_taint_effects=effects), found)
    assert (said is not None) is quarantined
    if said is not None:
        assert (said.reason, said.failure_class) == ("DeviceTaint", "accelerator")
        assert said.evidence.startswith(
            "device neuron-device-1 (neuron.aws.com) tainted neuron.aws.com/")
        assert said.since == "2027-01-15T08:00:00Z"


def test_the_state_keeps_only_tainted_slices_per_node_and_wakes_on_a_change() -> None:
    state = State()
    state.slice_taints("a", *device_taints(resource_slice("n1")))
    assert state.device_taints == {} and not state.wake.is_set()   # untainted: not kept
    state.slice_taints("a", *device_taints(resource_slice("n1", ("k", "NoExecute"))))
    state.slice_taints("b", *device_taints(resource_slice("n1", ("j", "NoSchedule"))))
    assert [t.key for t in state.device_taints["n1"]] == ["k", "j"] and state.wake.is_set()
    state.wake.clear()
    state.slice_taints("a", None, [])                              # deleted
    assert [t.key for t in state.device_taints["n1"]] == ["j"] and state.wake.is_set()
    state.slice_taints("b", *device_taints(resource_slice("n1")))  # healed
    assert state.device_taints == {} and state.tainted_slices() == []
