"""Simulated accelerator fleets as data: load, validate, generate, and turn into KWOK nodes.

A fleet file lists pools of identical instances grouped into domains (a Trn2 UltraServer,
an NVL72 NVLink domain, or for domainless instances such as p5 a leaf-switch group), and
domains grouped into network blocks. Nodes are labelled the way the real providers label
them (EKS topology labels or NVIDIA topograph's, GPU feature discovery's
`nvidia.com/gpu.clique`), so the operator sees the same thing here as on a real cluster.

Pure: no Kubernetes client. `goodput sandbox up --fleet NAME|FILE|synthetic:KIND:N`.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from goodput_operator.api.base import describe_errors

FLEET_API_VERSION = "sandbox.goodput.dev/v1alpha1"
FLEET_KIND = "SimulatedFleet"
ULTRASERVER_LABEL = "topology.k8s.aws/ultraserver-id"
NETWORK_LAYER_LABELS = tuple(f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3))
# NVIDIA topograph's, outermost first as EKS's are: where no provider labels the network
# (Azure, InfiniBand and RoCE clusters on premises), topograph does
TOPOGRAPH_LABELS = tuple(f"network.topology.nvidia.com/{level}"
                         for level in ("datacenter", "spine", "block"))
GPU_CLIQUE_LABEL = "nvidia.com/gpu.clique"
GKE_NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
FLEET_LABEL = "sandbox.goodput.dev/fleet"
POOL_LABEL = "sandbox.goodput.dev/pool"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
FAKE_NODE_SELECTOR = f"{KWOK_ANNOTATION}=fake"  # the nodes kwok manages (real ones lack it)

DEFAULT_FLEET = "mixed"
SYNTHETIC_DOMAINS_PER_BLOCK = 16
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


class FleetError(ValueError):
    """A fleet name or file that cannot be used; the message says which and why."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Taint(_Strict):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class Pool(_Strict):
    """Identical instances, `domains` x `nodes_per_domain` of them."""

    name: str
    instance_type: str = Field(alias="instanceType")
    domains: int = Field(ge=1, le=100_000)
    nodes_per_domain: int = Field(alias="nodesPerDomain", ge=1, le=1024)
    # label that names a node's tightly coupled domain; None for domainless instances (p5)
    domain_label: str | None = Field(default=None, alias="domainLabel")
    domains_per_block: int = Field(default=16, alias="domainsPerBlock", ge=1)
    # P6e-GB200: nodes per UltraServer (x36: 9, x72: 18), labelled with EKS's
    # topology.k8s.aws/ultraserver-id beside their NVLink clique; an UltraServer may hold
    # several cliques (an x72 split in two x36 halves: nodesPerDomain 9, ultraServerNodes 18)
    ultra_server_nodes: int | None = Field(default=None, alias="ultraServerNodes", ge=1)
    # who labels the three network layers above a node: EKS (topology.k8s.aws/
    # network-node-layer-1..3), NVIDIA topograph (network.topology.nvidia.com/datacenter,
    # spine, block), or nobody (GKE's TPU slices: the slice is all there is)
    network: Literal["eks", "topograph", "none"] = "eks"
    capacity: dict[str, str | int]
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not _NAME.match(value) or len(value) > 40:
            raise ValueError(f"pool name {value!r} must be a lowercase DNS label of <= 40 chars")
        return value

    @field_validator("capacity")
    @classmethod
    def _quantities(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        for resource, quantity in value.items():
            if not _QUANTITY.match(str(quantity)):
                raise ValueError(f"capacity[{resource}]={quantity!r} is not a Kubernetes quantity")
        return value

    @model_validator(mode="after")
    def _whole_domains(self) -> Pool:
        nodes = self.ultra_server_nodes
        if nodes is not None and (nodes % self.nodes_per_domain or
                                  (self.domains * self.nodes_per_domain) % nodes):
            raise ValueError(f"pool {self.name}: ultraServerNodes {nodes} must hold whole "
                             f"domains of {self.nodes_per_domain} nodes, and the pool whole "
                             "UltraServers")
        return self

    @property
    def node_count(self) -> int:
        return self.domains * self.nodes_per_domain

    @property
    def layer_labels(self) -> tuple[str, ...]:
        """The network layers' label keys, outermost first; the last names the leaf."""
        return {"eks": NETWORK_LAYER_LABELS, "topograph": TOPOGRAPH_LABELS,
                "none": ()}[self.network]


class FleetSpec(_Strict):
    region: str = "us-east-2"
    zone: str = "us-east-2a"
    pools: list[Pool] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_pools(self) -> FleetSpec:
        names = [p.name for p in self.pools]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"pool names must be unique; repeated: {', '.join(duplicated)}")
        return self


class FleetMeta(_Strict):
    name: str


class Fleet(_Strict):
    api_version: Literal["sandbox.goodput.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["SimulatedFleet"]
    metadata: FleetMeta
    spec: FleetSpec

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def node_count(self) -> int:
        return sum(p.node_count for p in self.spec.pools)


def builtin_names() -> list[str]:
    return sorted(p.stem for p in _builtin_dir().glob("*.yaml"))


def _builtin_dir() -> Path:
    return Path(str(resources.files("goodput_operator.sandbox") / "fleets"))


def parse(document: Any, source: str) -> Fleet:
    """Validate a fleet document; errors name the file and the field."""
    if not isinstance(document, dict):
        raise FleetError(f"{source}: a fleet file must be a YAML mapping with kind {FLEET_KIND}")
    try:
        return Fleet.model_validate(document)
    except ValidationError as err:
        problems = describe_errors(err)
        raise FleetError(f"{source}: invalid fleet: {problems}") from None


def load(ref: str = DEFAULT_FLEET) -> Fleet:
    """A fleet by built-in name, by file path, or `synthetic:KIND:N` (N domains of KIND)."""
    if ref.startswith("synthetic:"):
        return synthetic(ref)
    path = Path(ref)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise FleetError(f"fleet file {ref} does not exist")
        source = str(path)
        text = path.read_text()
    elif ref in builtin_names():
        source = f"built-in fleet {ref}"
        text = (_builtin_dir() / f"{ref}.yaml").read_text()
    else:
        raise FleetError(
            f"unknown fleet {ref!r}: use one of {', '.join(builtin_names())}, "
            "a fleet file (.yaml), or synthetic:KIND:N with KIND in trn2|p5|nvl72"
        )
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise FleetError(f"{source}: not valid YAML: {err}".replace("\n", " ")) from None
    return parse(document, source)


def synthetic(ref: str) -> Fleet:
    """`synthetic:trn2:256` -> the trn2 pool scaled to 256 domains (here UltraServers),
    in network blocks of SYNTHETIC_DOMAINS_PER_BLOCK domains. KIND may also be a fleet
    file (its first pool is scaled)."""
    parts = ref.split(":")
    kinds = ("trn2", "p5", "nvl72")
    known = len(parts) == 3 and (parts[1] in kinds or (
        parts[1].endswith((".yaml", ".yml")) and Path(parts[1]).is_file()))
    if not known or not parts[2].isdigit() or int(parts[2]) < 1:
        raise FleetError(
            f"bad synthetic fleet {ref!r}: write synthetic:KIND:N with KIND in "
            f"{'|'.join(kinds)} or a fleet file, and N >= 1 domains"
        )
    base = load(parts[1])
    pool = base.spec.pools[0].model_copy(
        update={"domains": int(parts[2]), "domains_per_block": SYNTHETIC_DOMAINS_PER_BLOCK}
    )
    name = f"synthetic-{base.name}-{parts[2]}"
    spec = base.spec.model_copy(update={"pools": [pool]})
    return base.model_copy(update={"metadata": FleetMeta(name=name), "spec": spec})


def _switch_id(*parts: str) -> str:
    """Stable fake switch/domain ids shaped like the providers' (`nn-0f3a...`)."""
    return hashlib.sha1("/".join(parts).encode()).hexdigest()[:17]


def node_name(pool: Pool, domain: int, slot: int) -> str:
    width = max(2, len(str(pool.domains - 1)))
    return f"{pool.name}-{domain:0{width}d}-{slot}"


def pool_nodes(fleet: Fleet, pool: Pool) -> list[dict[str, Any]]:
    """Node objects (for the API server) of one pool, domain by domain in slot order."""
    spec = fleet.spec
    spine = "nn-" + _switch_id(fleet.name, pool.name, "layer1")
    capacity = {k: str(v) for k, v in pool.capacity.items()}
    nodes: list[dict[str, Any]] = []
    for domain in range(pool.domains):
        block = domain // pool.domains_per_block
        block_switch = "nn-" + _switch_id(fleet.name, pool.name, "block", str(block))
        leaf_switch = "nn-" + _switch_id(fleet.name, pool.name, "domain", str(domain))
        domain_labels: dict[str, str] = {}
        # an UltraServer's NVLink fabric has its own cluster UUID; its cliques are numbered
        per_ultra = (pool.ultra_server_nodes or 0) // pool.nodes_per_domain
        ultra, clique = divmod(domain, per_ultra) if per_ultra else (0, domain)
        if pool.domain_label == GPU_CLIQUE_LABEL:
            cluster_uuid = _switch_id(fleet.name, pool.name, "nvlink-cluster",
                                      *([str(ultra)] if per_ultra else []))
            domain_labels[GPU_CLIQUE_LABEL] = f"{cluster_uuid}.{clique}"
        elif pool.domain_label == GKE_NODEPOOL_LABEL:  # a TPU slice: a node pool, by name
            domain_labels[GKE_NODEPOOL_LABEL] = f"{pool.name}-{domain}"
        elif pool.domain_label:
            domain_id = _switch_id(fleet.name, pool.name, str(domain))
            domain_labels[pool.domain_label] = f"us-{domain_id}"
        if per_ultra:
            domain_labels[ULTRASERVER_LABEL] = "us-" + _switch_id(fleet.name, pool.name,
                                                                  "ultraserver", str(ultra))
        for slot in range(pool.nodes_per_domain):
            name = node_name(pool, domain, slot)
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                INSTANCE_TYPE_LABEL: pool.instance_type,
                ZONE_LABEL: spec.zone,
                REGION_LABEL: spec.region,
                **(dict(zip(pool.layer_labels, (spine, block_switch, leaf_switch), strict=True))
                   if pool.layer_labels else {}),
                FLEET_LABEL: fleet.name,
                POOL_LABEL: pool.name,
                **domain_labels,
                **pool.labels,
            }
            nodes.append({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": labels,
                    "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                },
                "spec": {"taints": [t.model_dump() for t in pool.taints]} if pool.taints else {},
                "status": {"capacity": dict(capacity), "allocatable": dict(capacity)},
            })
    return nodes


def nodes(fleet: Fleet) -> list[dict[str, Any]]:
    """Every node of the fleet, pool by pool."""
    return [node for pool in fleet.spec.pools for node in pool_nodes(fleet, pool)]


def summary(fleet: Fleet) -> str:
    lines = [f"fleet {fleet.name}: {fleet.node_count} nodes"]
    for pool in fleet.spec.pools:
        accel = {k: v for k, v in pool.capacity.items() if "/" in k}
        per_node = ", ".join(f"{v} {k}" for k, v in accel.items())
        lines.append(
            f"  {pool.name}: {pool.domains} domains x {pool.nodes_per_domain} "
            f"{pool.instance_type} ({per_node} each)"
        )
    return "\n".join(lines)
