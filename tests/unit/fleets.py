"""Small fleets for topology tests, shaped like the real ones."""

from __future__ import annotations

from typing import Any

from goodput_operator.topology.model import Fleet, GroupShape

US = "topology.k8s.aws/ultraserver-id"
L1, L2 = "topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2"


def node(name: str, domain: str, block: str = "b0", accelerators: int = 16,
         ready: bool = True, label: str = US, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {label: domain, L1: "spine", L2: block,
                                              **extra.get("labels", {})}},
        "spec": extra.get("spec", {}),
        "status": {"allocatable": {"aws.amazon.com/neuron": str(accelerators)},
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def trn2(domains: int = 4, per_block: int = 2, spares: int = 0, nodes_per_domain: int = 4,
         accelerators: int = 16, group_spares: int = 0) -> Fleet:
    """`domains` UltraServers of 4 x 16 chips: us-0.. in blocks of `per_block`."""
    shape = GroupShape(US, nodes_per_domain, accelerators, network_levels=(L1, L2),
                       spares_per_domain=spares, spares_per_group=group_spares,
                       domain_noun="UltraServer")
    nodes = [node(f"us{d}-n{s}", f"us-{d}", f"b{d // per_block}", accelerators)
             for d in range(domains) for s in range(nodes_per_domain)]
    return Fleet.from_objects(shape, nodes)


def nvl72(domains: int = 2) -> Fleet:
    shape = GroupShape("nvidia.com/gpu.clique", 18, 4, accelerator_resource="aws.amazon.com/neuron",
                       network_levels=(L1, L2), domain_noun="NVLink domain")
    nodes = [node(f"gb{d}-n{s}", f"clique.{d}", "b0", 4, label="nvidia.com/gpu.clique")
             for d in range(domains) for s in range(18)]
    return Fleet.from_objects(shape, nodes)


def slice_size(shape: dict[str, Any]) -> int:
    """How many of a gang's workers share one domain, as its spec says: a slice
    (topology.slice.size, TPU multislice) or the whole gang."""
    return int(((shape.get("topology") or {}).get("slice") or {}).get(
        "size", shape.get("workers", 1)))
