"""Fault injection: the same signals a real failure produces.

A simulated node fails by KWOK's `node-not-ready` stage (its Ready condition turns False
and stays so until healed); a pod fails by `pod-container-running-failed`, which terminates
its containers with the exit code we annotate. A real node fails as real nodes do: its
kubelet stops (a partition: the containers keep running, and the controller-manager marks
the node NotReady once its Lease is 50 s old), or with `crash` every container process on
it is killed at once.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from goodput_operator.health import notices
from goodput_operator.sandbox import realnode
from goodput_operator.sandbox.cluster import (
    Sandbox,
    SandboxError,
    is_node_ready,
    require_running,
)

NODE_NOT_READY = "node-not-ready.stage.kwok.x-k8s.io"
POD_FAILED = "pod-container-running-failed.stage.kwok.x-k8s.io"
POD_SUCCEED = "sandbox.goodput.dev/succeed"


def _get(sandbox: Sandbox, *args: str) -> dict[str, Any] | None:
    proc = sandbox.kubectl("get", *args, "-o", "json", check=False)
    if proc.returncode != 0:
        if "NotFound" in proc.stderr or "not found" in proc.stderr:
            return None
        raise SandboxError(f"kubectl get {' '.join(args)} failed: {proc.stderr.strip()}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _require_node(sandbox: Sandbox, node: str) -> dict[str, Any]:
    require_running(sandbox)
    found = _get(sandbox, "node", node)
    if found is None:
        raise SandboxError(
            f"node {node!r} does not exist in sandbox {sandbox.name!r} "
            "(list them with `goodput sandbox status` or `kubectl get nodes`)"
        )
    return found


HYPERPOD_HEALTH = "sagemaker.amazonaws.com/node-health-status"


@dataclass(frozen=True)
class Signal:
    """A health agent's way of saying a node is bad, as `fail-node --signal` injects it."""

    what: str  # for --help
    condition: tuple[str, str, str] | None = None  # type, status when failed, when healed
    labels: tuple[tuple[str, str, str | None], ...] = ()  # key, failed value, healed value
    device: bool = False  # taint a device in the node's ResourceSlice


SIGNALS: dict[str, Signal] = {
    "not-ready": Signal("Ready=False: KWOK's chaos stage, or a real node's kubelet stops"),
    "accelerated-hardware": Signal(
        "condition AcceleratedHardwareReady=False, as the EKS node monitoring agent sets it "
        "on a DCGM or Neuron error", ("AcceleratedHardwareReady", "False", "True")),
    "networking": Signal("condition NetworkingReady=False (EKS node monitoring agent: EFA, "
                         "interfaces)", ("NetworkingReady", "False", "True")),
    "neuron-health": Signal("condition NeuronHealth=True (neuron-problem-detector)",
                            ("NeuronHealth", "True", "False")),
    "gpu-health": Signal("condition GpuHealth=True (a DCGM-based GPU health agent)",
                         ("GpuHealth", "True", "False")),
    "device-taint": Signal(
        "a NoExecute taint on the node's first DRA device (its ResourceSlice), as a DRA "
        "driver's health monitoring sets it (the Neuron DRA driver, NVIDIA's)", device=True),
    "hyperpod": Signal(
        "label sagemaker.amazonaws.com/node-health-status=UnschedulablePendingReplacement, "
        "as SageMaker HyperPod's health-monitoring agent sets it",
        labels=((HYPERPOD_HEALTH, "UnschedulablePendingReplacement", "Schedulable"),
                ("sagemaker.amazonaws.com/fault-type", "SimulatedFault", None),
                ("sagemaker.amazonaws.com/fault-reason", "InjectedBySandbox", None))),
}
"""What `goodput sandbox fail-node --signal` can inject; heal-node takes any of them back."""


def _set_condition(sandbox: Sandbox, nodes: tuple[str, ...], kind: str, status: str,
                   reason: str, message: str) -> None:
    """Write a node condition as an agent does (`condition_patch`)."""
    patch = condition_patch(kind, status, reason, message)
    for node in nodes:
        sandbox.kubectl("patch", "node", node, "--subresource=status", "--type=strategic",
                        "-p", json.dumps(patch))


def condition_patch(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
    """A node status patch setting one condition, to be sent as a strategic merge patch:
    merged by type, so the kubelet's (or KWOK's) own conditions stay as they are."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"status": {"conditions": [{
        "type": kind, "status": status, "reason": reason, "message": message,
        "lastHeartbeatTime": now, "lastTransitionTime": now}]}}


DEVICE_TAINT = "sandbox.goodput.dev/unhealthy"


def _slices(sandbox: Sandbox, node: str) -> list[dict[str, Any]]:
    found = _get(sandbox, "resourceslices", "--field-selector", f"spec.nodeName={node}")
    return list((found or {}).get("items") or [])


def _taint_devices(sandbox: Sandbox, node: str, taint: dict[str, str] | None) -> None:
    """Put TAINT on the first device of NODE's first ResourceSlice (None: take every
    sandbox taint off its devices)."""
    slices = _slices(sandbox, node)
    if taint is not None and not slices:
        raise SandboxError(f"node {node} publishes no ResourceSlice: --signal device-taint "
                           "needs a Trainium or GPU node")
    for index, found in enumerate(slices):
        devices = found["spec"].get("devices") or []
        for position, device in enumerate(devices):
            kept = [t for t in device.get("taints") or [] if t.get("key") != DEVICE_TAINT]
            if taint is not None and index == 0 and position == 0:
                kept.append(taint)
            if kept:
                device["taints"] = kept
            else:
                device.pop("taints", None)
        sandbox.kubectl("replace", "-f", "-", input_text=json.dumps(found))


def _signal_failure(sandbox: Sandbox, nodes: tuple[str, ...], signal: Signal, reason: str,
                    message: str) -> None:
    if signal.condition is not None:
        kind, failed, _ = signal.condition
        _set_condition(sandbox, nodes, kind, failed, reason, message)
    if signal.labels:
        sandbox.kubectl("label", "node", *nodes, "--overwrite",
                        *(f"{key}={value}" for key, value, _ in signal.labels))
    if signal.device:
        for node in nodes:
            _taint_devices(sandbox, node, {"key": DEVICE_TAINT, "value": reason,
                                           "effect": "NoExecute"})


def _heal_signals(sandbox: Sandbox, node: dict[str, Any]) -> None:
    """Take back every injected signal NODE still shows."""
    name = node["metadata"]["name"]
    conditions = {c.get("type"): c.get("status")
                  for c in (node.get("status") or {}).get("conditions") or []}
    labels = node["metadata"].get("labels") or {}
    for signal in SIGNALS.values():
        if signal.condition is not None:
            kind, failed, healed = signal.condition
            if conditions.get(kind) == failed:
                _set_condition(sandbox, (name,), kind, healed, "Healed",
                               "healed by goodput sandbox heal-node")
        changes = [f"{key}={healed}" if healed else f"{key}-"
                   for key, failed, healed in signal.labels if key in labels]
        if any(labels.get(key) == failed for key, failed, _ in signal.labels):
            sandbox.kubectl("label", "node", name, "--overwrite", *changes)
    if any(t.get("key") == DEVICE_TAINT for s in _slices(sandbox, name)
           for d in s["spec"].get("devices") or [] for t in d.get("taints") or []):
        _taint_devices(sandbox, name, None)
    _lift_notices(sandbox, node)


# what `goodput sandbox notice-node --kind` puts on a node, as the tools that give notice
# do (health.notices); None: a cordon, the first step of a drain
NOTICES: dict[str, str | None] = {
    "spot": notices.NTH_SPOT_TAINT, "rebalance": notices.NTH_REBALANCE_TAINT,
    "maintenance": notices.NTH_MAINTENANCE_TAINT, "asg": notices.NTH_ASG_TAINT,
    "karpenter": notices.KARPENTER_DISRUPTED_TAINT, "drain": None}


def notice_node(sandbox: Sandbox, *nodes: str, kind: str = "spot") -> None:
    """Give NODES notice that they are about to go, as the AWS Node Termination Handler
    (a NoSchedule taint), Karpenter (its disruption taint) or a drain (a cordon) would;
    heal-node lifts it. The node itself keeps running: a notice comes before the end."""
    if kind not in NOTICES:
        raise SandboxError(f"--kind must be one of {', '.join(NOTICES)}, got {kind!r}")
    for node in nodes:
        _require_node(sandbox, node)
    key = NOTICES[kind]
    if key is None:
        sandbox.kubectl("cordon", *nodes)
    else:
        sandbox.kubectl("taint", "node", *nodes, "--overwrite", f"{key}=true:NoSchedule")


def _lift_notices(sandbox: Sandbox, node: dict[str, Any]) -> None:
    name, spec = node["metadata"]["name"], node.get("spec") or {}
    keys = [t["key"] for t in spec.get("taints") or [] if t.get("key") in NOTICES.values()]
    if keys:
        sandbox.kubectl("taint", "node", name, *(f"{key}-" for key in keys))
    if spec.get("unschedulable"):
        sandbox.kubectl("uncordon", name)


def fail_node(sandbox: Sandbox, *nodes: str, reason: str = "SimulatedFailure",
              message: str = "node failed (injected by goodput sandbox fail-node)",
              crash: bool = False, signal: str = "not-ready") -> None:
    """Make NODES fail until `heal_node`; several nodes fail together (one write). By
    default they turn NotReady: real nodes lose their kubelet, or with CRASH their
    containers. Any other SIGNAL is what a health agent would write on the node, which
    stays Ready (see SIGNALS)."""
    if signal not in SIGNALS:
        raise SandboxError(f"--signal must be one of {', '.join(SIGNALS)}, got {signal!r}")
    if crash and signal != "not-ready":
        raise SandboxError("--crash kills a real node's containers; it takes no --signal")
    for node in nodes:
        _require_node(sandbox, node)
    if signal != "not-ready":
        _signal_failure(sandbox, nodes, SIGNALS[signal], reason, message)
        return
    real = {n.name: n for n in realnode.load(sandbox.home)}
    if crash and any(n not in real for n in nodes):  # refused before anything is done
        raise SandboxError("--crash applies to real nodes only (simulated nodes run no "
                           "containers); use fail-pod for a simulated worker")
    runtime = sandbox.real_runtime()
    for node in nodes:
        if node in real:
            if crash:
                runtime.crash(real[node])
            else:
                runtime.stop_kubelet(real[node])
    nodes = tuple(n for n in nodes if n not in real)
    if not nodes:
        return
    sandbox.kubectl(
        "annotate", "node", *nodes, "--overwrite",
        f"{NODE_NOT_READY}/reason={reason}", f"{NODE_NOT_READY}/message={message}",
        f"{NODE_NOT_READY}/delay=0s", f"{NODE_NOT_READY}/jitter-delay=0s",
    )
    sandbox.kubectl("label", "node", *nodes, "--overwrite", f"{NODE_NOT_READY}=true")


def heal_node(sandbox: Sandbox, *nodes: str) -> None:
    """Remove the failure; KWOK's node-initialize stage makes simulated nodes Ready again,
    a real node's kubelet is started again (it takes its running pods back), and injected
    health signals say healthy again."""
    for node in nodes:
        _heal_signals(sandbox, _require_node(sandbox, node))
    real = {n.name: n for n in realnode.load(sandbox.home)}
    runtime = sandbox.real_runtime()
    for node in nodes:
        if node in real and not runtime.kubelet_running(real[node]):
            runtime.start_kubelet(real[node])
    nodes = tuple(n for n in nodes if n not in real)
    if not nodes:
        return
    sandbox.kubectl("label", "node", *nodes, f"{NODE_NOT_READY}-")
    sandbox.kubectl(
        "annotate", "node", *nodes, f"{NODE_NOT_READY}/reason-", f"{NODE_NOT_READY}/message-",
        f"{NODE_NOT_READY}/delay-", f"{NODE_NOT_READY}/jitter-delay-",
    )


# what the node lifecycle controller puts on a node that stopped answering; it takes them
# off a few seconds after the node is Ready again
LIFECYCLE_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


def recovered(node: dict[str, Any]) -> bool:
    """Ready, and the lifecycle controller's taints gone: only then may a quarantine be
    lifted (the operator counts those taints as a remediator's verdict)."""
    return is_node_ready(node) and not any(
        t.get("key") in LIFECYCLE_TAINTS for t in (node.get("spec") or {}).get("taints") or [])


def wait_recovered(sandbox: Sandbox, node: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not recovered(_require_node(sandbox, node)):
        if time.monotonic() > deadline:
            raise SandboxError(f"node {node} did not recover within {timeout:.0f}s")
        time.sleep(0.5)


def succeed_pod(sandbox: Sandbox, pod: str, namespace: str = "default") -> None:
    """Finish a Running pod with exit code 0 (our goodput-pod-succeed stage)."""
    _require_running_pod(sandbox, pod, namespace)
    sandbox.kubectl("label", "pod", pod, "-n", namespace, "--overwrite", f"{POD_SUCCEED}=true")


def _require_running_pod(sandbox: Sandbox, pod: str, namespace: str) -> None:
    require_running(sandbox)
    found = _get(sandbox, "pod", pod, "-n", namespace)
    if found is None:
        raise SandboxError(f"pod {namespace}/{pod} does not exist in sandbox {sandbox.name!r}")
    phase = found.get("status", {}).get("phase")
    if phase != "Running":
        raise SandboxError(f"pod {namespace}/{pod} is {phase}; only a Running pod can finish")


def fail_pod(sandbox: Sandbox, pod: str, exit_code: int, namespace: str = "default",
             container: str | None = None) -> None:
    """Terminate a Running pod's containers (or one of them) with EXIT_CODE, reason
    Error, as containerd says of a process that exited non-zero (KWOK's own default,
    containerFailed, is no runtime's)."""
    if not 0 <= exit_code <= 255:
        raise SandboxError(f"--exit-code must be 0..255, got {exit_code}")
    _require_running_pod(sandbox, pod, namespace)
    annotations = [f"{POD_FAILED}/exit-code={exit_code}", f"{POD_FAILED}/reason=Error",
                   f"{POD_FAILED}/delay=0s", f"{POD_FAILED}/jitter-delay=0s"]
    if container:
        annotations.append(f"{POD_FAILED}/container-name={container}")
    sandbox.kubectl("annotate", "pod", pod, "-n", namespace, "--overwrite", *annotations)
    sandbox.kubectl("label", "pod", pod, "-n", namespace, "--overwrite", f"{POD_FAILED}=true")
