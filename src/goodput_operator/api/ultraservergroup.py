"""UltraServerGroup: a pool of tightly coupled accelerator domains found from node labels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, field_validator

from goodput_operator import names
from goodput_operator.api.accounting import Accounting
from goodput_operator.api.base import (
    LABEL_KEY,
    MESSAGE_LENGTH,
    RESOURCE_NAME,
    ApiModel,
    Condition,
    IntOrPercent,
    LabelKey,
    cel,
    conditions_field,
    nested,
    rules,
    schema_default,
)

Interconnect = Literal["neuronlink", "nvlink", "efa-only", "infiniband", "roce", "ici"]
DomainHealth = Literal["Healthy", "Degraded", "Failed"]
TaintEffect = Literal["NoSchedule", "NoExecute"]
DEFAULT_DEVICE_TAINT_EFFECTS: list[TaintEffect] = ["NoExecute"]
GroupHealth = Literal["Healthy", "Degraded", "Failed", "Empty"]

DEFAULT_HEALTH_CONDITIONS = [
    # node-problem-detector
    "KernelDeadlock", "ReadonlyFilesystem", "FrequentKubeletRestart",
    # neuron-problem-detector (Neuron node problem detector plugin)
    "NeuronHealth",
    # DCGM-based GPU health agents (NVSentinel / gpu-operator health checks)
    "GpuHealth", "GPUHealth",
]
DEFAULT_READY_CONDITIONS = [
    # the EKS node monitoring agent: one condition per category, False when it found a
    # problem (DCGM and Neuron errors, EFA, disks, kernel, container runtime)
    "AcceleratedHardwareReady", "NetworkingReady", "StorageReady", "KernelReady",
    "ContainerRuntimeReady",
]
DEFAULT_HEALTH_LABELS = [
    # SageMaker HyperPod: Unschedulable while its deep health checks run, then the verdict
    {"key": "sagemaker.amazonaws.com/node-health-status",
     "values": ["Unschedulable", "UnschedulablePendingReplacement", "UnschedulablePendingReboot"]},
    {"key": "sagemaker.amazonaws.com/deep-health-check-status", "values": ["Failed"]},
]
DEFAULT_HEALTH_TAINTS = [
    "sagemaker.amazonaws.com/node-health-status",
    "node.kubernetes.io/unreachable",
]


LEMON_HALF_LIFE_DAYS = 14  # quarantine.lemonHalfLifeDays' default

class Accelerator(ApiModel):
    """Which extended resource counts as an accelerator, and how many each node has."""

    model_config = rules(
        cel("!has(self.deviceClassName) || self.requestStyle == 'ResourceClaim'",
            "accelerator.deviceClassName is used with requestStyle ResourceClaim only",
            ".deviceClassName"),
    )

    resource: str = Field(default="aws.amazon.com/neuron", max_length=253, pattern=RESOURCE_NAME)
    """Extended resource name: aws.amazon.com/neuron for Trainium, nvidia.com/gpu for GPUs."""
    per_node: int = Field(ge=1, le=1024)
    """Accelerators each node is expected to have (16 for trn2u.48xlarge, 8 for p5, 4 for
    GB200). A node with fewer allocatable is reported as mis-shaped."""
    efa_per_node: int = Field(default=0, ge=0, le=64)
    """EFA interfaces (vpc.amazonaws.com/efa) each node has, as its allocatable says: 32
    on p5.48xlarge, 16 on trn2.48xlarge, 8 on p6-b200.48xlarge. A TrainingJob's pods
    request their share (all of them for a whole node) and get the EFA and NCCL settings,
    so that collectives run over EFA rather than TCP. 0: none requested."""
    rdma_resource: str | None = Field(default=None, max_length=253, pattern=RESOURCE_NAME)
    """The RDMA device resource a pod holding accelerators requests `rdmaPerPod` of, on
    InfiniBand and RoCE clusters: the RDMA shared device plugin's (`rdma/ib`, or the name
    its config gives, as the NVIDIA Network Operator deploys it) or an SR-IOV device
    plugin's. Without it a pod sees no HCA and NCCL falls back to TCP sockets, slowly and
    without an error. Unset: none requested (the pod template must reach the HCAs itself)."""
    rdma_per_pod: int = Field(default=1, ge=1, le=64)
    """How many of `rdmaResource` each pod holding accelerators requests: 1 for the shared
    device plugin (one grant gives every HCA of the node), the node's VFs for SR-IOV."""
    request_style: Literal["ExtendedResource", "ResourceClaim"] = "ExtendedResource"
    """How pods ask for accelerators. ExtendedResource: `resource` in their requests (the
    device plugins). ResourceClaim: Dynamic Resource Allocation (resource.k8s.io/v1): each
    pod claims `acceleratorsPerWorker` devices of `deviceClassName` through a
    ResourceClaimTemplate the operator creates for the job, and kube-scheduler allocates
    them on the node placement chose (the Neuron DRA driver, NVIDIA's DRA driver for GPUs).
    Capacity is then `perNode` per Ready node."""
    device_class_name: str | None = Field(default=None, max_length=253, pattern=RESOURCE_NAME)
    """The DeviceClass claimed with requestStyle ResourceClaim; by default the driver's for
    `resource`: neuron.aws.com (aws.amazon.com/neuron*), gpu.nvidia.com (nvidia.com/*)."""

    @property
    def device_class(self) -> str | None:
        """The DeviceClass pods claim, or None when they request the extended resource."""
        if self.request_style != "ResourceClaim":
            return None
        if self.device_class_name:
            return self.device_class_name
        return "gpu.nvidia.com" if self.resource.startswith("nvidia.com/") else "neuron.aws.com"


class SlotOrder(ApiModel):
    """How nodes are ordered inside a domain: slot 0..n-1 follow the physical fabric."""

    model_config = rules(
        cel("self.by != 'label' || has(self.label)",
            "slotOrder.label is required when slotOrder.by is 'label'", ".label"),
    )

    by: Literal["name", "label"] = "name"
    """`name`: by node name (natural sort); `label`: by the integer value of `label`."""
    label: str | None = Field(default=None, max_length=317, pattern=LABEL_KEY)
    """Node label holding the slot index, when `by` is `label`."""


class Spares(ApiModel):
    """Nodes held back for replacement. Spares never take new placements; they replace
    failed nodes (same domain first) and are refilled as nodes heal."""

    per_domain: int = Field(default=0, ge=0, le=64)
    """Spare nodes kept in each domain."""
    per_group: int = Field(default=0, ge=0, le=100_000)
    """Spare nodes kept for the whole group, on top of `perDomain`: its last nodes in
    fabric order. A multiple of `nodesPerDomain` holds whole domains back (a spare
    UltraServer), so gangs of whole domains stay whole and move there when one of
    their nodes fails."""


class HealthLabel(ApiModel):
    """A node label that another health system sets, and the values that mean the node is
    unhealthy."""

    key: LabelKey
    """The label's key, e.g. sagemaker.amazonaws.com/node-health-status."""
    values: list[Annotated[str, Field(max_length=63)]] = Field(min_length=1, max_length=16)
    """Label values that mean unhealthy (any other value, or no label, says nothing)."""


class Quarantine(ApiModel):
    """When a node is taken out of service, how far that may go, and when it returns."""

    lease_silence_seconds: int = Field(default=20, ge=0, le=3600)
    """A node whose kubelet has not renewed its Lease (kube-node-lease; renewed every 10 s)
    for this long, or for two of its own renewal intervals if that is longer, is failed at
    once: sooner than the node lifecycle controller marks it NotReady (40-50 s by default).
    Judged only for nodes seen renewing. 0: off."""
    not_ready_grace_seconds: int = Field(default=5, ge=0, le=3600)
    """Seconds a node may be NotReady or Unknown before it is quarantined (the kubelet's
    default eviction waits 300 s; training cannot)."""
    max_unavailable: IntOrPercent = "20%"
    """Storm guard: never quarantine more than this many nodes (or this percentage) of the
    group at once; beyond it the group reports a condition instead."""
    health_conditions: list[LabelKey] = Field(
        default_factory=lambda: list(DEFAULT_HEALTH_CONDITIONS), max_length=64,
        json_schema_extra=schema_default(DEFAULT_HEALTH_CONDITIONS),
    )
    """Node condition types that mean the device is unhealthy when their status is True
    (published by node-problem-detector, neuron-problem-detector, DCGM-based agents)."""
    ready_conditions: list[LabelKey] = Field(
        default_factory=lambda: list(DEFAULT_READY_CONDITIONS), max_length=64,
        json_schema_extra=schema_default(DEFAULT_READY_CONDITIONS),
    )
    """Node condition types that mean the node is unhealthy when their status is False (the
    EKS node monitoring agent's AcceleratedHardwareReady and its siblings); Unknown or a
    missing condition says nothing."""
    health_labels: list[HealthLabel] = Field(
        default_factory=lambda: [HealthLabel.model_validate(x) for x in DEFAULT_HEALTH_LABELS],
        max_length=16, json_schema_extra=schema_default(DEFAULT_HEALTH_LABELS),
    )
    """Node labels whose listed values mean the node is unhealthy (SageMaker HyperPod's
    node-health-status and deep-health-check-status by default); the node returns to
    service once the label says otherwise for releaseAfterHealthySeconds."""
    device_taint_effects: list[TaintEffect] = Field(
        default_factory=lambda: list(DEFAULT_DEVICE_TAINT_EFFECTS), max_length=2,
        json_schema_extra=schema_default(["NoExecute"]))
    """DRA device taints (on a device in a node's ResourceSlice, set by its driver or a
    health agent) with these effects mean the node is unhealthy: a gang holding the whole
    node cannot run on a bad device. [] ignores them."""
    health_taints: list[LabelKey] = Field(
        default_factory=lambda: list(DEFAULT_HEALTH_TAINTS), max_length=64,
        json_schema_extra=schema_default(DEFAULT_HEALTH_TAINTS),
    )
    """Taint keys set by other remediation systems that mean the node is unhealthy."""
    release_after_healthy_seconds: int = Field(default=600, ge=0, le=604_800)
    """A quarantined node returns to service after being healthy this long (0: only by
    hand, `goodput node release`)."""
    release_after_clean_probes: int = Field(default=3, ge=0, le=100)
    """For SDC suspects: clean probe runs needed before release."""
    lemon_half_life_days: int = Field(default=LEMON_HALF_LIFE_DAYS, ge=1, le=3650)
    """A node's incident score (the goodput.dev/lemon-score annotation: one per
    quarantine) halves every this many days: placement prefers nodes with a clean recent
    history at equal topology cost, spares are taken from the worst, and an old incident
    weighs less than last week's."""


class Probes(ApiModel):
    """The silent-data-corruption probe: a deterministic matmul consensus test."""

    schedule: str = Field(default="0 */6 * * *", max_length=128, pattern=r"^$|^(\S+\s+){4}\S+$")
    """Cron schedule (5 fields) for probing idle nodes; an empty string disables them."""
    on_suspicion: bool = True
    """Probe a node suspected of corruption before it may be released."""
    image: str | None = Field(default=None, max_length=1024)
    """Image that runs the probe; defaults to the operator's image."""


class NoticeDeadlines(ApiModel):
    """How long a running gang may take to save once one of its nodes announces that it
    is going (docs/recovery.md, "Notices"), by who gave the notice. When it has passed the
    node counts as lost to the job, saved or not, and its ranks move to a spare. Waiting
    longer costs nothing where the node stays until the gang lets it go (a drain waits on
    the job's PodDisruptionBudget): it gives a slow save time to finish; a trainer that
    never saves holds the node that long. 0: move at once, unsaved."""

    spot_interruption: int = Field(default=120, ge=0, le=86_400)
    """The AWS Node Termination Handler's spot-itn taint: EC2 reclaims a Spot instance two
    minutes after its interruption notice, whatever the gang does."""
    rebalance_recommendation: int = Field(default=600, ge=0, le=86_400)
    """The Node Termination Handler's rebalance-recommendation taint: EC2 says the instance
    is at higher risk of interruption and names no time (a Spot notice may follow)."""
    scheduled_maintenance: int = Field(default=600, ge=0, le=86_400)
    """The Node Termination Handler's scheduled-maintenance taint: an EC2 scheduled event
    (a reboot, a retirement), posted ahead of its start."""
    auto_scaling_termination: int = Field(default=600, ge=0, le=86_400)
    """The Node Termination Handler's asg-lifecycle-termination taint: the Auto Scaling
    lifecycle hook holds the instance while it drains, up to the hook's heartbeat timeout
    (3600 s unless set)."""
    karpenter_disruption: int = Field(default=600, ge=0, le=86_400)
    """Karpenter's disruption taint: Karpenter drains honouring PodDisruptionBudgets, for at
    most its NodePool's terminationGracePeriod (none unless set)."""
    drain: int = Field(default=600, ge=0, le=86_400)
    """A cordon (`kubectl drain`'s first step, and that of every tool built on it):
    `kubectl drain` retries the evictions the budget refuses until its `--timeout` (none
    unless given)."""

    def seconds(self, kind: str) -> int:
        """The deadline for a notice of KIND (health.notices' kinds: SpotInterruption, ...,
        Drain)."""
        return {"SpotInterruption": self.spot_interruption,
                "RebalanceRecommendation": self.rebalance_recommendation,
                "ScheduledMaintenance": self.scheduled_maintenance,
                "AutoScalingTermination": self.auto_scaling_termination,
                "KarpenterDisruption": self.karpenter_disruption,
                "Drain": self.drain}[kind]


@dataclass(frozen=True)
class Traits:
    """What an interconnect means to the operator, in one place: the node label naming
    a domain, what a person calls one, whether nodes talk RDMA (InfiniBand verbs: NCCL's
    IB transport, an RDMA device per pod), and whether a gang takes domains whole (a TPU
    slice: its hosts form one fixed-shape mesh)."""

    domain_label: str
    noun: str = "domain"
    rdma: bool = False
    whole_domains: bool = False


INTERCONNECTS: dict[str, Traits] = {
    "neuronlink": Traits("topology.k8s.aws/ultraserver-id", "UltraServer"),
    "nvlink": Traits("nvidia.com/gpu.clique", "NVLink domain"),
    "efa-only": Traits("topology.k8s.aws/network-node-layer-3"),
    # NVIDIA topograph's leaf: the switch block the nodes hang off (Azure, InfiniBand and
    # RoCE clusters on premises)
    "infiniband": Traits("network.topology.nvidia.com/block", rdma=True),
    "roce": Traits("network.topology.nvidia.com/block", rdma=True),
    # a multi-host TPU slice is a GKE node pool of its own
    "ici": Traits("cloud.google.com/gke-nodepool", "TPU slice", whole_domains=True),
}


# labels the operator writes on each member from the group's membership: selecting on
# them would be circular, and their changes are not watched (state.OWN_NODE_LABELS)
OWN_LABELS = (names.GROUP_LABEL, names.NODE_DOMAIN_LABEL, names.SLOT_LABEL)
OWN_LABELS_MESSAGE = (f"nodeSelector may not select on {', '.join(OWN_LABELS)}: the "
                      "operator writes those labels from the group's membership")


class UltraServerGroupSpec(ApiModel):
    """Which nodes form the group and how they are shaped, spared and quarantined."""

    model_config = rules(
        cel("self.spares.perDomain < self.nodesPerDomain",
            "spares.perDomain must be less than nodesPerDomain", ".spares.perDomain"),
        cel("self.interconnect != 'ici' || self.spares.perDomain == 0",
            "a TPU slice (interconnect ici) runs whole and has no spare host: hold whole "
            "slices back with spares.perGroup", ".spares.perDomain"),
        cel("!self.nodeSelector.exists(k, k in [" + ", ".join(f"'{k}'" for k in OWN_LABELS)
            + "])", OWN_LABELS_MESSAGE, ".nodeSelector"),
    )

    node_selector: dict[str, str] = Field(min_length=1, max_length=32)
    """Labels a node must carry to belong to the group, e.g.
    node.kubernetes.io/instance-type: trn2u.48xlarge."""
    domain_label: str | None = Field(default=None, max_length=317, pattern=LABEL_KEY)
    """Node label whose value names the node's domain. Defaults by `interconnect`:
    topology.k8s.aws/ultraserver-id (neuronlink: a Trn2 UltraServer), nvidia.com/gpu.clique
    (nvlink: a GB200 NVL72 domain), topology.k8s.aws/network-node-layer-3 (efa-only: the
    network leaf a node hangs off), network.topology.nvidia.com/block (infiniband, roce:
    the leaf switch block, as NVIDIA topograph labels it), cloud.google.com/gke-nodepool
    (ici: a multi-host TPU slice is a node pool)."""
    network_levels: list[LabelKey] = Field(default_factory=list, max_length=8)
    """Node label keys of the network levels above a domain, outermost first, e.g.
    topology.k8s.aws/network-node-layer-1, -2."""
    accelerator: Accelerator
    """The accelerator resource and its count per node."""
    nodes_per_domain: int = Field(ge=1, le=1024)
    """Nodes in a complete domain: 4 for a Trn2 UltraServer, 18 for GB200 NVL72."""
    interconnect: Interconnect = "neuronlink"
    """The fabric inside a domain: neuronlink, nvlink, or a network alone where the domain
    is a leaf switch: efa-only (AWS EFA), infiniband (Azure ND H100 v5, on premises) or
    roce (RDMA over Converged Ethernet); or ici, a TPU slice's inter-chip interconnect: a
    slice runs whole, one worker per host holding all its chips, and a gang is whole slices
    (topology.slice.size nodesPerDomain for several). It sets the default `domainLabel`,
    what a domain is called in messages (UltraServer, NVLink domain, TPU slice, domain)
    and, on infiniband and roce, the NCCL settings GPU workers get (docs/fleets.md)."""
    slot_order: SlotOrder = nested(SlotOrder)
    """How nodes are ordered inside a domain."""
    spares: Spares = nested(Spares)
    """Spare nodes kept for replacement."""
    quarantine: Quarantine = nested(Quarantine)
    """Failure detection, storm guard and release policy."""
    probes: Probes = nested(Probes)
    """Silent-data-corruption probe settings."""
    notice_deadline_seconds: NoticeDeadlines = nested(NoticeDeadlines)
    """How long a gang may take to save when one of its nodes is about to go, by the kind
    of notice (a Spot interruption, maintenance, Karpenter, a drain)."""
    compute_domains: bool = True
    """With interconnect nvlink (GB200/GB300 NVL72): a TrainingJob of more than one worker
    gets a ComputeDomain (resource.nvidia.com, NVIDIA's DRA driver for GPUs) and each pod
    holding GPUs a claim on its IMEX channel, so that the gang shares GPU memory across
    nodes over NVLink. false: for clusters without the driver (a gang then uses NVLink only
    inside each node)."""

    price_per_accelerator_hour: float | None = Field(default=None, ge=0, le=1_000_000)
    """What one accelerator-hour of this group costs (any currency): `goodput report`
    turns status.accounting's accelerator-seconds into cost per namespace, per state and
    per job with it. Unset: no costs are shown."""

    @field_validator("node_selector")
    @classmethod
    def _not_on_own_labels(cls, selector: dict[str, str]) -> dict[str, str]:
        """A group stored before the schema refused these keys is refused here instead."""
        if set(selector) & set(OWN_LABELS):
            raise ValueError(OWN_LABELS_MESSAGE)
        return selector

    @property
    def domain_key(self) -> str:
        """The label naming a node's domain: domainLabel, else the interconnect's."""
        return self.domain_label or self.traits.domain_label

    @property
    def traits(self) -> Traits:
        return INTERCONNECTS[self.interconnect]


class DomainStatus(ApiModel):
    """One domain as last observed."""

    id: str
    """The domain label's value."""
    health: DomainHealth
    """Healthy: complete and all Ready; Degraded: some node out; Failed: unusable."""
    nodes_ready: int = Field(ge=0)
    """Ready, unquarantined nodes."""
    nodes_total: int = Field(ge=0)
    """Nodes found in the domain."""
    free_accelerators: int = Field(ge=0)
    """Accelerators not requested by any bound pod, on usable nodes."""
    quarantined_nodes: list[str] = Field(default_factory=list)
    """Nodes of this domain in quarantine."""
    spares: list[str] = Field(default_factory=list)
    """Nodes of this domain held as spares."""
    standby_for: str | None = None
    """The InferenceEndpoint (namespace/name) holding it free on standby."""


class GroupTotals(ApiModel):
    """Totals across the group."""

    domains: int = Field(default=0, ge=0)
    """Domains found."""
    healthy_domains: int = Field(default=0, ge=0)
    """Domains that are complete and fully Ready."""
    nodes: int = Field(default=0, ge=0)
    """Nodes in the group."""
    ready_nodes: int = Field(default=0, ge=0)
    """Ready, unquarantined nodes."""
    accelerators: int = Field(default=0, ge=0)
    """Accelerators on usable nodes."""
    free_accelerators: int = Field(default=0, ge=0)
    """Accelerators not requested by any bound pod."""
    quarantined: int = Field(default=0, ge=0)
    """Nodes in quarantine."""
    spares: int = Field(default=0, ge=0)
    """Nodes held as spares."""
    standby_domains: int = Field(default=0, ge=0)
    """Domains InferenceEndpoints hold free on standby (scaling.standbyDomains)."""


MAX_LISTED_DOMAINS = 256  # status.domains' length: the object stays far below etcd's limit
MAX_IGNORED_PODS = 32  # status.ignoredPods' length


class IgnoredPod(ApiModel):
    """A pod of someone else's pinned to one of the group's nodes that books nothing there
    (its devices are not counted until it binds)."""

    pod: str = Field(max_length=317)
    """namespace/name."""
    node: str = Field(max_length=253)
    """The node it is pinned to."""
    reason: str = Field(max_length=MESSAGE_LENGTH)
    """Why it books nothing: held by scheduling gates of its own, or pinned and unbound
    for over 300 s."""


MAX_HELD_EVIDENCE = 32  # status.heldEvidence's length


class HeldEvidence(ApiModel):
    """A node a job's reports (SDC votes, a straggler's pace) or a probe blamed, not
    quarantined yet: the blame budget (quarantine.maxUnavailable, at most half of it per
    namespace) is in use, or a tenant's hold on the node ended less than 30 minutes ago
    (`notBefore`). Kept until it fits, or until the job that blamed it is gone."""

    node: str = Field(max_length=253)
    """The node blamed."""
    reason: str = Field(max_length=64)
    """SilentDataCorruption or Straggler."""
    owner: str = Field(default="", max_length=317)
    """namespace/name of the job whose reports blamed it; empty: a probe."""
    since: str = Field(max_length=64)
    """When the blame was first made."""
    evidence: str = Field(max_length=MESSAGE_LENGTH)
    """What the reports or the probe found."""
    not_before: str | None = Field(default=None, max_length=64)
    """Set when a tenant's hold on the node ended lately (a clean probe answered it, or it
    timed out): the job's reports may hold the node out again (and ask for another probe)
    only from then on, so tenants' word costs at most one probe and one hold of a node per
    hour."""


class UltraServerGroupStatus(ApiModel):
    """Observed state of the group, written by the operator."""

    observed_generation: int | None = None
    """The .metadata.generation this status was computed from."""
    health: GroupHealth | None = None
    """Worst domain health, or Empty when no node matches."""
    totals: GroupTotals = nested(GroupTotals)
    """Totals across domains."""
    domains: list[DomainStatus] = Field(
        default_factory=list, max_length=MAX_LISTED_DOMAINS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"]},
    )
    """Domains' health, readiness, free accelerators, quarantine and spares, in fabric
    order: at most 256, chosen first among those not Healthy or with a node in quarantine
    (every domain of a 5,000-UltraServer group made a 1.4 MB object whose status write took
    over 30 s; at 7,800 it would pass etcd's 1.5 MiB limit). `totals` counts them all."""
    domains_omitted: int = Field(default=0, ge=0)
    """Domains left out of `domains`."""
    ignored_pods: list[IgnoredPod] = Field(default_factory=list, max_length=MAX_IGNORED_PODS)
    """Foreign pods pinned to the group's nodes that book no accelerators there (the first
    32 by name): a pod with scheduling gates of its own cannot bind, and one pinned and
    still unbound 300 s after its creation stops booking, so neither holds the node from
    everyone else."""
    ignored_pods_omitted: int = Field(default=0, ge=0)
    """Ignored pods left out of `ignoredPods`."""
    held_evidence: list[HeldEvidence] = Field(default_factory=list,
                                              max_length=MAX_HELD_EVIDENCE)
    """Blame not acted on yet (the oldest 32): which node, why, and whose reports."""
    held_evidence_omitted: int = Field(default=0, ge=0)
    """Held evidence left out of `heldEvidence`."""
    accounting: Accounting | None = None
    """Where the group's accelerator-seconds went, by state and by namespace
    (api/accounting.py); the states add up to the whole."""
    conditions: list[Condition] = conditions_field()
    """Ready, Degraded, StormGuard, MisShaped, Overlapping (another, older group keeps some
    of the nodes the selector matches), ProbesScheduled, ProbesInconclusive (a quarantined
    node whose probe could not exercise its accelerators) conditions."""
