"""What the clouds' and vendors' health agents already say about a node, read as failures.

Pure: nodes are plain dicts, the policy is the group's `Quarantine` model. Agents speak in
three ways, and each way has its own polarity:

- a *problem* condition is bad when True (node-problem-detector's KernelDeadlock,
  neuron-problem-detector's NeuronHealth, DCGM-based agents' GpuHealth);
- a *readiness* condition is bad when False (the EKS node monitoring agent's
  AcceleratedHardwareReady, NetworkingReady, StorageReady, KernelReady,
  ContainerRuntimeReady): Unknown or missing says nothing (the agent may not run there);
- a *label* is bad for some values (SageMaker HyperPod's node-health-status
  UnschedulablePendingReplacement, its deep-health-check-status Failed), and a *taint* by
  its key (another remediation system's verdict);
- a *device taint* (DRA, KEP-5055: on a device in a ResourceSlice, set by the device's
  driver or health agent: the Neuron DRA driver, NVIDIA's) with one of the group's effects:
  one bad device takes a node out of gangs that hold whole nodes.

Each signal maps to a failure class (accelerator, network, storage, kernel, runtime, node)
that travels with its evidence onto the quarantined node, into events and metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Sequence

    from goodput_operator.api.ultraservergroup import Quarantine

Obj = dict[str, Any]
FailureClass = Literal["accelerator", "network", "storage", "kernel", "runtime", "node"]

HYPERPOD_FAULT_TYPE = "sagemaker.amazonaws.com/fault-type"
HYPERPOD_FAULT_REASON = "sagemaker.amazonaws.com/fault-reason"

CLASS_OF: dict[str, FailureClass] = {
    # EKS node monitoring agent (readiness: False is bad)
    "AcceleratedHardwareReady": "accelerator", "NetworkingReady": "network",
    "StorageReady": "storage", "KernelReady": "kernel", "ContainerRuntimeReady": "runtime",
    # node-problem-detector, neuron-problem-detector, DCGM-based agents (True is bad)
    "KernelDeadlock": "kernel", "ReadonlyFilesystem": "storage",
    "FrequentKubeletRestart": "runtime", "NeuronHealth": "accelerator",
    "GpuHealth": "accelerator", "GPUHealth": "accelerator",
}
"""The failure class of the signals we know; any other signal a group lists is `node`."""

SOURCE_OF: dict[str, str] = {
    **dict.fromkeys(("AcceleratedHardwareReady", "NetworkingReady", "StorageReady",
                     "KernelReady", "ContainerRuntimeReady"), "EKS node monitoring agent"),
    **dict.fromkeys(("KernelDeadlock", "ReadonlyFilesystem", "FrequentKubeletRestart"),
                    "node-problem-detector"),
    "NeuronHealth": "neuron-problem-detector",
    "GpuHealth": "a DCGM-based GPU health agent", "GPUHealth": "a DCGM-based GPU health agent",
    "sagemaker.amazonaws.com/node-health-status": "SageMaker HyperPod",
    "sagemaker.amazonaws.com/deep-health-check-status": "SageMaker HyperPod",
}


def class_of(key: str) -> FailureClass:
    return CLASS_OF.get(key, "node")


@dataclass(frozen=True)
class DeviceTaint:
    """A taint on one of a node's devices, as its ResourceSlice carries it."""

    driver: str
    device: str
    key: str
    value: str
    effect: str
    added: str | None  # RFC 3339


def device_taints(resource_slice: Obj) -> tuple[str | None, list[DeviceTaint]]:
    """The node a ResourceSlice is for (None: a network-attached pool) and its devices'
    taints."""
    spec = resource_slice.get("spec") or {}
    found = [DeviceTaint(str(spec.get("driver", "")), str(device.get("name", "")),
                         str(taint.get("key", "")), str(taint.get("value", "")),
                         str(taint.get("effect", "")), taint.get("timeAdded"))
             for device in spec.get("devices") or [] for taint in device.get("taints") or []]
    return spec.get("nodeName"), found


@dataclass(frozen=True)
class Signal:
    """One agent's verdict on a node: which rule, what it says, since when (if it says)."""

    reason: str  # HealthTaint | NodeCondition | HealthLabel
    key: str
    failure_class: FailureClass
    evidence: str
    since: str | None  # RFC 3339, when the agent says the problem began


def _by(key: str) -> str:
    source = SOURCE_OF.get(key)
    return f"; {source}" if source else ""


def signal_of(node: Obj, policy: Quarantine,
              devices: Sequence[DeviceTaint] = ()) -> Signal | None:
    """The first thing an agent says is wrong with NODE (taints, then conditions, then
    labels, then DEVICES' taints), or None."""
    for taint in (node.get("spec") or {}).get("taints") or []:
        key = taint.get("key")
        if key in policy.health_taints:
            return Signal("HealthTaint", key, class_of(key),
                          f"taint {key}={taint.get('value', '')}:{taint.get('effect', '')}"
                          f" ({class_of(key)} failure{_by(key)})", taint.get("timeAdded"))
    for condition in (node.get("status") or {}).get("conditions") or []:
        kind, status = condition.get("type"), condition.get("status")
        if (kind in policy.health_conditions and status == "True") or \
                (kind in policy.ready_conditions and status == "False"):
            detail = f"{condition.get('reason', '')}: {condition.get('message', '')}"
            return Signal("NodeCondition", kind, class_of(kind),
                          f"condition {kind}={status} ({detail.strip(': ')}; "
                          f"{class_of(kind)} failure{_by(kind)})",
                          condition.get("lastTransitionTime"))
    labels = (node.get("metadata") or {}).get("labels") or {}
    for rule in policy.health_labels:
        value = labels.get(rule.key)
        if value is not None and value in rule.values:
            fault = labels.get(HYPERPOD_FAULT_TYPE)
            cause = (f", fault {fault}: {labels.get(HYPERPOD_FAULT_REASON, '')}".rstrip(": ")
                     if fault else "")
            return Signal("HealthLabel", rule.key, class_of(rule.key),
                          f"label {rule.key}={value} ({class_of(rule.key)} failure"
                          f"{_by(rule.key)}{cause})", None)
    for taint in devices:
        if taint.effect in policy.device_taint_effects:
            return Signal("DeviceTaint", taint.key, "accelerator",
                          f"device {taint.device} ({taint.driver}) tainted {taint.key}="
                          f"{taint.value}:{taint.effect} (accelerator failure; its DRA "
                          "driver or health agent)", taint.added)
    return None
