"""What a gang's pod needs from its node besides accelerators to reach the fabric: its share
of the node's EFA interfaces, the settings the collective libraries read, and on
multi-node NVLink its IMEX channel (resources.computedomain).

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


@dataclass(frozen=True)
class Fabric:
    """The group's accelerator resource, its count per node and the node's EFA interfaces
    (0: none requested)."""

    resource: str
    per_node: int = 1
    efa_per_node: int = 0
    imex: bool = False  # multi-node NVLink: a gang's pods claim a ComputeDomain's channel
    device_class: str | None = None  # DRA: pods claim devices of this class instead

    @classmethod
    def of(cls, spec: UltraServerGroupSpec) -> Fabric:
        return cls(spec.accelerator.resource, spec.accelerator.per_node,
                   spec.accelerator.efa_per_node,
                   spec.interconnect == "nvlink" and spec.compute_domains,
                   spec.accelerator.device_class)

    def efa_for(self, accelerators: int) -> int:
        """A pod's share of its node's EFA interfaces: in proportion to the accelerators it
        holds (all of them for a whole node), at least one when it holds any."""
        if not self.efa_per_node or accelerators <= 0:
            return 0
        return max(1, self.efa_per_node * min(accelerators, self.per_node) // self.per_node)

    def env(self, launcher: str, accelerators: int) -> dict[str, str]:
        """The collective libraries' settings for a pod holding ACCELERATORS, started by
        LAUNCHER: EFA's when it gets interfaces (always for the Neuron launcher, which has
        set them since before EFA was requested), NCCL's on NVIDIA GPUs."""
        env: dict[str, str] = {}
        if self.efa_for(accelerators) or launcher == "neuron":
            env |= EFA_ENV
        if accelerator_kind(self.resource) == "cuda" and launcher != "none":
            env |= NCCL_ENV
        return env

    def fit_out(self, containers: list[Obj], forced: list[Obj], launcher: str,
                accelerators: int) -> None:
        """Dress a gang pod's CONTAINERS: each gets the FORCED variables (in place of its
        own of those names) and the fabric's settings it does not set itself; the first,
        when the pod holds ACCELERATORS, its devices (unless claimed by DRA) and share of
        EFA in requests and limits."""
        ours = {e["name"] for e in forced}
        defaults = self.env(launcher, accelerators)
        devices = {EFA_RESOURCE: self.efa_for(accelerators)}
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
