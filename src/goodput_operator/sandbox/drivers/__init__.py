"""The DRA drivers of the sandbox's simulated accelerators, as far as the control plane sees
them: what the Neuron DRA driver publishes for Trainium nodes, and what NVIDIA's DRA driver
for GPUs publishes for GPU nodes and does for multi-node NVLink.

- `objects`: the Neuron and NVIDIA GPU DeviceClasses and, for every simulated Trainium or
  GPU node, a ResourceSlice of its devices; the ComputeDomain CRD, the IMEX channel
  DeviceClass, and for every simulated GB200 node (one with an `nvidia.com/gpu.clique`)
  a ResourceSlice of its IMEX channels: published per node, as the drivers' kubelet
  plugins do. The real kube-scheduler then allocates the claims of pods placed there.
- `reconcile`: the driver's controller, one pass: for every ComputeDomain the
  ResourceClaimTemplate it names (owned by the domain, carrying the domain's id in its
  config, as the driver writes it), and the domain's status: the nodes whose claims are
  allocated (`python -m goodput_operator.sandbox.drivers` runs it in a loop; `goodput
  sandbox up` starts that process and `down` stops it).

What is not simulated: the IMEX daemons themselves (KWOK nodes run no containers), so a
node joins a domain as soon as its claim is allocated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
NEURON_DRIVER = "neuron.aws.com"  # its DeviceClass has the same name
NEURON_RESOURCE = "aws.amazon.com/neuron"
GPU_DRIVER = "gpu.nvidia.com"  # NVIDIA's DRA driver for GPUs; its DeviceClass too
DRIVER = "compute-domain.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
GPU_RESOURCE = "nvidia.com/gpu"
CRD = Path(__file__).with_name("computedomains.yaml")
DOMAINS = ("resource.nvidia.com", "v1beta1", "computedomains")
TEMPLATES = ("resource.k8s.io", "v1", "resourceclaimtemplates")
CLAIMS = ("resource.k8s.io", "v1", "resourceclaims")


def channel_class() -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": CHANNEL_CLASS},
            "spec": {"selectors": [{"cel": {"expression":
                f"device.driver == '{DRIVER}' && "
                f"device.attributes['{DRIVER}'].type == 'channel'"}}]}}


def channel_slice(node: Obj) -> Obj | None:
    """NODE's IMEX channels, if it is a multi-node NVLink node: one per GPU, so that each
    pod on it (up to one per GPU) can hold one."""
    labels = node["metadata"].get("labels") or {}
    clique = labels.get(CLIQUE_LABEL)
    if not clique:
        return None
    gpus = int(str((node.get("status") or {}).get("allocatable", {}).get(GPU_RESOURCE, 1)))
    name = node["metadata"]["name"]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": name,
                     "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"channel-{i}", "attributes": {
                         "type": {"string": "channel"}, "id": {"int": i},
                         "cliqueID": {"string": clique}}} for i in range(gpus)]}}


def device_class(driver: str) -> Obj:
    """The class of every device DRIVER publishes (the drivers name it after themselves)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": driver},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]}}


DEVICES = {NEURON_DRIVER: (NEURON_RESOURCE, "neuron-device"), GPU_DRIVER: (GPU_RESOURCE, "gpu")}
"""Each driver: the node's extended resource that says how many devices it has, and the
prefix of the devices' names."""


def device_slice(node: Obj, driver: str) -> Obj | None:
    """NODE's devices of DRIVER, if it has any (as its allocatable counts them), with a few
    attributes of the kinds the drivers publish (instance type, index, UltraServer; the
    names are ours: the sandbox's claims select by class only)."""
    resource, prefix = DEVICES[driver]
    labels = node["metadata"].get("labels") or {}
    devices = int(str((node.get("status") or {}).get("allocatable", {}).get(resource, 0)))
    if not devices:
        return None
    name = node["metadata"]["name"]
    shared = {"instanceType": {"string": labels.get("node.kubernetes.io/instance-type", "")},
              "ultraServerId": {"string": labels.get("topology.k8s.aws/ultraserver-id", "")}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-{driver}"},
            "spec": {"driver": driver, "nodeName": name,
                     "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"{prefix}-{i}", "attributes": {
                         **shared, "index": {"int": i}}} for i in range(devices)]}}


def objects(nodes: list[Obj]) -> list[Obj]:
    """What the drivers install and publish for NODES (a CRD first, when any)."""
    channels = [s for s in map(channel_slice, nodes) if s is not None]
    found: list[Obj] = []
    if channels:
        found += [yaml.safe_load(CRD.read_text()), channel_class(), *channels]
    for driver in DEVICES:
        slices = [s for n in nodes if (s := device_slice(n, driver)) is not None]
        if slices:
            found += [device_class(driver), *slices]
    return found


def channel_template(domain: Obj) -> Obj:
    """The ResourceClaimTemplate the driver creates for DOMAIN: one channel, configured
    with the domain's id (its uid), owned by the domain."""
    meta = domain["metadata"]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": domain["spec"]["channel"]["resourceClaimTemplate"]["name"],
                         "namespace": meta["namespace"],
                         "labels": {"resource.nvidia.com/computeDomain": meta["uid"]},
                         "ownerReferences": [{"apiVersion": "resource.nvidia.com/v1beta1",
                                              "kind": "ComputeDomain", "name": meta["name"],
                                              "uid": meta["uid"], "controller": True}]},
            "spec": {"spec": {"devices": {
                "requests": [{"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS}}],
                "config": [{"requests": ["channel"], "opaque": {"driver": DRIVER, "parameters": {
                    "apiVersion": "resource.nvidia.com/v1beta1",
                    "kind": "ComputeDomainChannelConfig", "domainID": meta["uid"]}}}]}}}}


def domain_of(claim: Obj) -> str | None:
    """The ComputeDomain id a claim's channel is configured for."""
    for config in ((claim.get("spec") or {}).get("devices") or {}).get("config") or []:
        opaque = config.get("opaque") or {}
        if opaque.get("driver") == DRIVER:
            found = (opaque.get("parameters") or {}).get("domainID")
            return str(found) if found else None
    return None


def allocated_node(claim: Obj) -> str | None:
    """The node a claim's devices were allocated on (the scheduler's node selector)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return str(field["values"][0])
    return None


def domain_status(domain: Obj, claims: list[Obj], cliques: dict[str, str]) -> Obj:
    """DOMAIN's status from the allocated CLAIMS configured for it: its nodes (clique,
    index by name), Ready once it has any (numNodes 0) or numNodes of them."""
    nodes = sorted({n for c in claims if domain_of(c) == domain["metadata"]["uid"]
                    and (n := allocated_node(c)) is not None})
    wanted = int(domain["spec"].get("numNodes") or 0)
    ready = bool(nodes) and len(nodes) >= wanted
    return {"status": "Ready" if ready else "NotReady",
            "nodes": [{"name": n, "cliqueID": cliques.get(n, ""), "index": i, "status": "Ready",
                       "ipAddress": ""} for i, n in enumerate(nodes)]}
