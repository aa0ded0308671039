"""What a gang's pod needs from its node besides accelerators to reach the fabric: its share
of the node's EFA interfaces or its RDMA devices (InfiniBand, RoCE), the settings the
collective libraries read, and on multi-node NVLink its IMEX channel
(resources.computedomain).

Pure. The EFA device plugin hands a pod the interfaces it requests
(`vpc.amazonaws.com/efa`); without them NCCL and the Neuron runtime fall back to TCP over
the pod network, a tenth of the bandwidth or less, and nothing fails loudly. The settings
are AWS's for NCCL over EFA (aws-ofi-nccl) and the Neuron runtime's; they are defaults:
a variable the pod template sets wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from goodput_operator.health.probing import accelerator_kind

if TYPE_CHECKING:
    from goodput_operator.api.ultraservergroup import UltraServerGroupSpec

Obj = dict[str, Any]
EFA_RESOURCE = "vpc.amazonaws.com/efa"

EFA_ENV = {  # libfabric's EFA provider, GPUDirect RDMA, fork safety for data loaders
    "FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1",
}
NCCL_ENV = {  # NCCL's bootstrap sockets: the pod's interface, never loopback or bridges
    "NCCL_SOCKET_IFNAME": "^lo,docker",
}
# InfiniBand and RoCE: NCCL's IB verbs transport (RoCE's too), and only it: a pod that
# cannot reach an HCA fails at its first collective instead of running on TCP sockets
RDMA_NCCL_ENV = {"NCCL_NET": "IB"}


@dataclass(frozen=True)
class Fabric:
    """The group's accelerator resource, its count per node and the node's EFA interfaces
    (0: none requested)."""

    resource: str
    per_node: int = 1
    efa_per_node: int = 0
    imex: bool = False  # multi-node NVLink: a gang's pods claim a ComputeDomain's channel
    device_class: str | None = None  # DRA: pods claim devices of this class instead
    rdma: bool = False  # InfiniBand or RoCE between nodes: NCCL's IB transport
    rdma_resource: str | None = None  # each pod holding accelerators requests RDMA_PER_POD
    rdma_per_pod: int = 1

    @classmethod
    def of(cls, spec: UltraServerGroupSpec) -> Fabric:
        accelerator = spec.accelerator
        return cls(accelerator.resource, accelerator.per_node, accelerator.efa_per_node,
                   spec.interconnect == "nvlink" and spec.compute_domains,
                   accelerator.device_class, spec.traits.rdma,
                   accelerator.rdma_resource, accelerator.rdma_per_pod)

    def efa_for(self, accelerators: int) -> int:
        """A pod's share of its node's EFA interfaces: in proportion to the accelerators it
        holds (all of them for a whole node), at least one when it holds any."""
        if not self.efa_per_node or accelerators <= 0:
            return 0
        return max(1, self.efa_per_node * min(accelerators, self.per_node) // self.per_node)

    def env(self, launcher: str, accelerators: int) -> dict[str, str]:
        """The collective libraries' settings for a pod holding ACCELERATORS, started by
        LAUNCHER: EFA's when it gets interfaces (always for the Neuron launcher, which has
        set them since before EFA was requested), NCCL's on NVIDIA GPUs, over IB verbs on
        InfiniBand and RoCE."""
        env: dict[str, str] = {}
        if self.efa_for(accelerators) or launcher == "neuron":
            env |= EFA_ENV
        if accelerator_kind(self.resource) == "cuda" and launcher != "none":
            env |= NCCL_ENV | (RDMA_NCCL_ENV if self.rdma else {})
        return env

    def fit_out(self, containers: list[Obj], forced: list[Obj], launcher: str,
                accelerators: int) -> None:
        """Dress a gang pod's CONTAINERS: each gets the FORCED variables (in place of its
        own of those names) and the fabric's settings it does not set itself; the first,
        when the pod holds ACCELERATORS, its devices (unless claimed by DRA), its share of
        EFA and its RDMA devices in requests and limits."""
        ours = {e["name"] for e in forced}
        defaults = self.env(launcher, accelerators)
        devices = {EFA_RESOURCE: self.efa_for(accelerators)}
        if self.rdma_resource:
            devices[self.rdma_resource] = self.rdma_per_pod
        if not self.device_class:  # else claimed through DRA (resources.claims)
            devices[self.resource] = accelerators
        for position, container in enumerate(containers):
            own = [e for e in container.get("env") or [] if e["name"] not in ours]
            given = {e["name"] for e in own}
            container["env"] = own + forced + [{"name": k, "value": v}
                                               for k, v in defaults.items() if k not in given]
            if position == 0 and accelerators:  # the first container holds the devices
                resources = container.setdefault("resources", {})
                for kind in ("requests", "limits"):
                    resources.setdefault(kind, {}).update(
                        {name: str(count) for name, count in devices.items() if count})
