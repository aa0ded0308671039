"""InferenceEndpoint: replicas (possibly multi-node groups inside one domain), autoscaled."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import Field, field_validator

from goodput_operator.api.base import (
    DNS_SUBDOMAIN,
    ApiModel,
    Condition,
    IntOrPercent,
    JsonDict,
    PodTemplate,
    cel,
    conditions_field,
    field_rules,
    immutable,
    nested,
    rules,
    schema_default,
)
from goodput_operator.autoscaling import promql

MetricType = Literal["QueueDepth", "Concurrency", "TTFTp95", "TokensPerSecond", "RequestRate",
                     "KVCacheUtilization", "PromQL"]

MAX_REPLICAS = 4096  # replica groups of one endpoint
MAX_RECENT_SCALING = 16  # status.recentScaling: the newest decisions kept
MAX_REGIONS = 16  # spec.regions and status.regions
MAX_PODS = 8192  # pods of one endpoint at its largest: replica groups x pods per group
RoleName = Literal["decode", "prefill"]
# a disaggregated endpoint's roles; decode anchors units
ROLE_NAMES: tuple[RoleName, ...] = ("decode", "prefill")


def as_role(name: str) -> RoleName | None:
    """NAME (a ServingRole's) as a disaggregated endpoint's role; None for "" (a single-role
    endpoint's pool)."""
    return "decode" if name == "decode" else "prefill" if name == "prefill" else None


class Model(ApiModel):
    """The model served."""

    name: str = Field(min_length=1, max_length=253)
    """Model name, passed to servers as GOODPUT_MODEL_NAME."""
    source: str | None = Field(default=None, max_length=4096)
    """Where the weights are (s3://, hf://, a path); passed as GOODPUT_MODEL_SOURCE."""


class ReplicaShape(ApiModel):
    """One replica: a leader and workers, placed together inside one domain."""

    workers: int = Field(default=1, ge=1, le=72)
    """Pods per replica (1: single node). Multi-node replicas always stay in one domain."""
    accelerators_per_worker: int = Field(ge=1, le=1024)
    """Accelerators each pod of the replica requests."""


class MetricTarget(ApiModel):
    """One scaling signal and its target per replica."""

    model_config = rules(
        cel("self.type != 'PromQL' || has(self.query)",
            "scaling.metrics[].query is required when type is PromQL", ".query",
            reason="FieldValueRequired"),
        cel("self.type == 'PromQL' || !has(self.query)",
            "scaling.metrics[].query is only allowed when type is PromQL", ".query"),
        cel("self.type != 'KVCacheUtilization' || self.target <= 1.0",
            "scaling.metrics[].target of KVCacheUtilization is a fraction of the cache: "
            "at most 1", ".target"),
    )

    type: MetricType
    """QueueDepth (waiting requests per replica), Concurrency (in-flight per replica),
    TTFTp95 (seconds), TokensPerSecond (generated, per replica), RequestRate (arriving
    requests/s; target: what one replica serves; with a QueueDepth metric too, replicas
    for the arrivals plus replicas that drain the queue), KVCacheUtilization (the
    replicas' average KV-cache use, 0-1), or PromQL (your query)."""
    target: float = Field(gt=0, le=1_000_000_000)
    """Target value per replica; for TTFTp95, seconds; for RequestRate, the requests/s one
    replica serves within your latency objective; for KVCacheUtilization, the fraction of
    the cache to keep in use (e.g. 0.8)."""
    query: str | None = Field(default=None, min_length=1, max_length=4096)
    """PromQL returning one number for the whole endpoint (PromQL type only). It may read
    at most an hour back (its ranges and offsets added up) and evaluate at most 3,600
    subquery steps; a query past that leaves the endpoint not Ready (`InvalidSpec`, naming
    the bound), and Prometheus is told to stop evaluating any query after 5 s."""

    @field_validator("query")
    @classmethod
    def _bounded_cost(cls, query: str | None) -> str | None:
        """What the query makes a shared Prometheus read is bounded before it is sent
        (TENANCY.md rule 5); the schema can bound only its length."""
        if query is not None:
            promql.check(query)
        return query


class ScalingPolicy(ApiModel):
    """At most `value` replicas (or percent) per `periodSeconds`."""

    type: Literal["Replicas", "Percent"]
    """Replicas: an absolute count; Percent: of current replicas."""
    value: int = Field(ge=1, le=10_000)
    """How many replicas, or what percentage."""
    period_seconds: int = Field(default=60, ge=1, le=1800)
    """Window the limit applies to."""


class ScalingRules(ApiModel):
    """Stabilization and rate limits for one direction."""

    stabilization_seconds: int = Field(ge=0, le=3600)
    """Use the most conservative recommendation over this many seconds."""
    policies: list[ScalingPolicy] = Field(default_factory=list, max_length=8)
    """Rate limits; with several, `selectPolicy` picks."""
    select_policy: Literal["Max", "Min", "Disabled"] = "Max"
    """Max: the policy allowing the biggest change; Min: the smallest; Disabled: never
    scale in this direction."""


class Panic(ApiModel):
    """Knative-style panic mode: react within a short window to bursts."""

    enabled: bool = False
    """Turn panic mode on."""
    window_seconds: int = Field(default=6, ge=1, le=600)
    """Demand is averaged over this many seconds before it is compared with the threshold:
    one outlying sample does not panic, a burst that lasts does."""
    threshold: float = Field(default=2.0, gt=1, le=100)
    """Enter panic when the window's average demand exceeds this multiple of what the
    current replicas are sized for."""


class Scaling(ApiModel):
    """Autoscaling from Prometheus metrics. Absent: spec.replicas (or /scale) decides."""

    model_config = rules(
        cel("self.minReplicas <= self.maxReplicas",
            "scaling.minReplicas must be <= scaling.maxReplicas", ".minReplicas"),
        cel("self.minReplicas > 0 || has(self.scaleToZeroAfterSeconds)",
            "scaling.minReplicas 0 needs scaling.scaleToZeroAfterSeconds", ".minReplicas",
            reason="FieldValueRequired"),
        cel("!self.metrics.exists(m, m.type == 'RequestRate') || "
            "self.scaleDown.stabilizationSeconds >= 60",
            "scaling.scaleDown.stabilizationSeconds must be at least 60 with a RequestRate "
            "metric: its rate over 1m reads a new replica's counter low for a minute, and a "
            "shorter window would scale down on that", ".scaleDown.stabilizationSeconds"),
    )

    min_replicas: int = Field(default=1, ge=0, le=MAX_REPLICAS)
    """Fewest replicas; 0 allows scale to zero after `scaleToZeroAfterSeconds` idle."""
    max_replicas: int = Field(ge=1, le=MAX_REPLICAS)
    """Most replicas; also capped by what free whole domains can host."""
    metrics: list[MetricTarget] = Field(min_length=1, max_length=8)
    """Signals to scale on; the largest recommendation wins."""
    metric_names: Literal["vLLM", "SGLang"] = "vLLM"
    """Whose metric names the default queries read: vLLM's (`vllm:num_requests_waiting`,
    ...) or SGLang's (`sglang:num_queue_reqs`, ...)."""
    tolerance: float = Field(default=0.1, ge=0, lt=1)
    """Ignore ratios within 1 +/- tolerance of the target (no flapping)."""
    lookahead_seconds: int = Field(default=0, ge=0, le=3600)
    """Judge QueueDepth and Concurrency where their recent trend takes them this many
    seconds from now, and RequestRate where its rise over the last this-many seconds takes
    it (set it to a replica's start-up time, plus half the rate's window: 30 s for the
    default queries; replicas asked for now only help then). A growing queue or a rising
    rate scales up sooner (the scale-down window keeps the rate as seen, not the lead); a
    draining queue adds nothing, a falling rate is judged as it is. 0: off."""
    interval_seconds: int = Field(default=15, ge=1, le=600)
    """How often metrics are evaluated."""
    scale_up: ScalingRules = Field(
        default_factory=lambda: ScalingRules(stabilization_seconds=0),
        json_schema_extra=schema_default({"stabilizationSeconds": 0}),
    )
    """Scale-up stabilization and rate limits."""
    scale_down: ScalingRules = Field(
        default_factory=lambda: ScalingRules(stabilization_seconds=300),
        json_schema_extra=schema_default({"stabilizationSeconds": 300}),
    )
    """Scale-down stabilization and rate limits."""
    scale_to_zero_after_seconds: int | None = Field(default=None, ge=30, le=604_800)
    """With minReplicas 0: scale to zero after this long with no demand; back on demand."""
    panic: Panic = nested(Panic)
    """Burst handling."""
    prometheus_url: str | None = Field(default=None, max_length=2048,
                                       pattern=r"^https?://")
    """Prometheus to query; defaults to the operator's configured URL."""
    standby_domains: int = Field(default=0, ge=0, le=64)
    """Whole domains kept free for the next replica groups, so that a burst's replica is
    placed at once; at most the operator's --standby-domains-per-namespace for all of a
    namespace's endpoints together (the admin's cap: standby is held outside any quota).
    Meanwhile training jobs that set borrowStandby may borrow them (only when nothing else
    fits them): preemptible capacity, reclaimed, after the job's checkpoint grace, when a
    replica group needs it, never from a job of a higher class than the endpoint's
    (priorityClassName). 0: none."""


class Rollout(ApiModel):
    """How a template change replaces replica groups."""

    model_config = rules(
        cel("!(self.maxSurge == 0 && self.maxUnavailable == 0) && "
            "!(self.maxSurge == '0%' && self.maxUnavailable == '0%')",
            "rollout.maxSurge and rollout.maxUnavailable cannot both be 0", ".maxSurge"),
    )

    max_surge: IntOrPercent = 1
    """Extra replica groups allowed above the desired count during a rollout."""
    max_unavailable: IntOrPercent = 0
    """Replica groups that may be unavailable during a rollout."""


def _largest(path: str) -> str:
    """CEL: the most replica groups the role or endpoint at PATH may have."""
    return (f"(has({path}.scaling) ? {path}.scaling.maxReplicas : "
            f"(has({path}.replicas) ? {path}.replicas : 1))")


def _within_bounds(prefix: str) -> JsonDict:
    return cel("!has(self.scaling) || !has(self.replicas) || "
               "(self.replicas >= self.scaling.minReplicas && "
               "self.replicas <= self.scaling.maxReplicas)",
               f"{prefix}replicas must lie within {prefix}scaling.minReplicas.."
               f"{prefix}scaling.maxReplicas", ".replicas")


class Role(ApiModel):
    """One role of a disaggregated endpoint: its replica shape, its server pod and its own
    size (fixed, or autoscaled on its own signals)."""

    model_config = rules(
        _within_bounds("roles.<role>."),
        cel("!has(self.scaling) || self.scaling.minReplicas >= 1",
            "roles.<role>.scaling.minReplicas must be at least 1: every serving unit keeps "
            "each role", ".scaling.minReplicas"),
        cel("!has(self.scaling) || self.scaling.standbyDomains == 0",
            "roles.<role>.scaling.standbyDomains is for single-role endpoints",
            ".scaling.standbyDomains"),
    )

    replica_shape: ReplicaShape = Field(
        json_schema_extra=field_rules(immutable("roles.<role>.replicaShape")),
    )
    """Pods per replica of this role and accelerators per pod."""
    template: PodTemplate | None = None
    """This role's server pod; defaults to spec.template (GOODPUT_SERVING_ROLE says which
    role a pod serves)."""
    replicas: int | None = Field(default=None, ge=1, le=MAX_REPLICAS)
    """Replicas of this role when `scaling` is absent; defaults to 1."""
    scaling: Scaling | None = None
    """This role's autoscaling (e.g. decode on KVCacheUtilization, prefill on QueueDepth);
    the default queries read only this role's pods (the `role` label)."""


class RatioBound(ApiModel):
    """Prefill replicas per decode replica, at least `min` and at most `max`."""

    model_config = rules(cel("self.min <= self.max",
                             "roles.prefillPerDecode.min must be <= roles.prefillPerDecode.max",
                             ".min"))

    min: float = Field(default=0.0, ge=0, le=64)
    """Fewest prefill replicas per decode replica (rounded up)."""
    max: float = Field(default=64.0, gt=0, le=64)
    """Most prefill replicas per decode replica (rounded down; every unit keeps one)."""


class Roles(ApiModel):
    """Disaggregated serving: prefill and decode pools, scaled apart, placed in units.

    A serving unit is one `affinity` scope (an NVLink domain, or a network block) holding
    decode replicas and the prefill replicas beside them, so KV-cache transfers stay inside
    it. Decode replicas anchor the units; every unit keeps at least one prefill replica;
    a new unit's first replicas of both roles are placed together, all or none."""

    decode: Role
    """The decode pool: holds the KV cache and takes the requests (the endpoint's Service
    selects its leaders)."""
    prefill: Role
    """The prefill pool: computes prompts' KV cache and hands it to a decode replica of
    its unit."""
    affinity: Literal["Domain", "NetworkBlock"] = "Domain"
    """What one unit spans: one domain (an NVLink domain or UltraServer), or one network
    block (the group's innermost networkLevels value)."""
    prefill_per_decode: RatioBound | None = None
    """Bounds the prefill pool by the decode pool's size."""


class Region(ApiModel):
    """One region of a multi-region endpoint: a worker cluster MultiKueue sends to."""

    name: str = Field(min_length=1, max_length=40, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    """The region's name (a DNS label), in the replicas' names and the status."""
    queue: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """A LocalQueue in the endpoint's namespace whose ClusterQueue's MultiKueue admission
    check targets this region's cluster alone (`goodput sandbox connect` makes one check
    per worker, named after it)."""
    weight: int = Field(default=1, ge=0, le=1000)
    """split Weighted: this region's share of the replicas (0: only when no other region
    can take them)."""


class MultiRegion(ApiModel):
    """Serve from several clusters through MultiKueue: each replica is a one-replica
    endpoint sent to a region's queue; the operator on the manager sizes, places and
    moves them (docs/multicluster.md)."""

    model_config = rules(
        cel("self.split != 'Weighted' || self.regions.exists(r, r.weight > 0)",
            "split Weighted needs a region with a weight above 0", ".regions"),
    )

    split: Literal["Capacity", "Weighted"] = "Capacity"
    """Where new replicas go. Capacity: the healthy region with the most room its replicas
    report (then the fewest replicas). Weighted: the healthy region furthest below its
    weight's share. Healthy replicas are never moved to rebalance; a scale-down removes
    from the region with the least room (Capacity) or furthest above its share
    (Weighted)."""
    failover_seconds: int = Field(default=60, ge=5, le=3600)
    """A replica not ready (or not admitted by its region's Kueue) this long is moved to
    another region, and its region takes no new replica for as long."""
    traffic_return_seconds: int = Field(default=60, ge=5, le=3600)
    """Where the operator routes requests (its `--haproxy-runtime-api`): a region drained
    of traffic (no ready replica, its entry down, or saturated) takes requests again only
    after it has been healthy this long, then a quarter of its share more every quarter
    of this (docs/multicluster.md, "Routing requests")."""
    regions: list[Region] = Field(
        min_length=1, max_length=MAX_REGIONS,
        json_schema_extra={"x-kubernetes-list-type": "map",
                           "x-kubernetes-list-map-keys": ["name"]})
    """The regions, names unique (at most 16)."""


class InferenceEndpointSpec(ApiModel):
    """What to serve, in which shape, and how many replicas."""

    model_config = rules(
        _within_bounds(""),
        cel("has(self.replicaShape) != has(self.roles)",
            "set exactly one of replicaShape (one role) and roles (prefill and decode)",
            ".replicaShape", reason="FieldValueRequired"),
        cel("!has(self.roles) || (!has(self.replicas) && !has(self.scaling))",
            "with roles, each role has its own size: set roles.decode and roles.prefill "
            "replicas or scaling, not spec.replicas or spec.scaling", ".roles"),
        cel("has(self.roles) == has(oldSelf.roles)",
            "roles cannot be added or removed once the endpoint exists", ".roles",
            reason="FieldValueForbidden"),
        cel("!has(self.multiRegion) || !has(self.roles)",
            "multiRegion serves one role: use replicaShape, not roles", ".multiRegion"),
        cel("!has(self.multiRegion) || !has(self.scaling) || "
            "self.scaling.standbyDomains == 0",
            "multiRegion has no standby domains (the manager holds no nodes)",
            ".scaling.standbyDomains"),
        cel("!has(self.multiRegion) || !has(self.scaling) || "
            "self.scaling.metrics.all(m, has(m.query))",
            "with multiRegion every scaling metric needs a query: the replicas' metrics are "
            "in the regions, so say where the global figures are (e.g. a Thanos or "
            "federated Prometheus)", ".scaling.metrics"),
        cel("!has(self.multiRegion) || !has(self.managedBy)",
            "a multiRegion endpoint runs on the manager: it cannot itself be managedBy "
            "MultiKueue", ".multiRegion"),
        cel("has(self.managedBy) == has(oldSelf.managedBy)",
            "managedBy cannot be added or removed once the endpoint exists", ".managedBy",
            reason="FieldValueForbidden"),
        cel(f"(has(self.replicaShape) ? self.replicaShape.workers * {_largest('self')} : "
            f"(has(self.roles) ? self.roles.decode.replicaShape.workers * "
            f"{_largest('self.roles.decode')} + self.roles.prefill.replicaShape.workers * "
            f"{_largest('self.roles.prefill')} : 0)) <= {MAX_PODS}",
            f"replicas (or scaling.maxReplicas) x replicaShape.workers must be at most "
            f"{MAX_PODS} pods (for roles, both roles together)", ".replicaShape.workers"),
    )

    ultra_server_group: str = Field(
        max_length=253, pattern=DNS_SUBDOMAIN,
        json_schema_extra=field_rules(immutable("ultraServerGroup")),
    )
    """The UltraServerGroup whose domains host the replicas."""
    model: Model
    """The model served."""
    template: PodTemplate
    """The server pod (leader and workers alike; GOODPUT_ROLE tells them apart); with
    roles, the default of each role's template."""
    replica_shape: ReplicaShape | None = Field(
        default=None, json_schema_extra=field_rules(immutable("replicaShape")),
    )
    """Pods per replica and accelerators per pod (one role; else `roles`)."""
    replicas: int | None = Field(default=None, ge=0, le=MAX_REPLICAS)
    """Desired replicas when `scaling` is absent (the /scale subresource sets it);
    defaults to 1. With `scaling`, the autoscaler decides within its bounds."""
    priority_class_name: str | None = Field(
        default=None, min_length=1, max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    """The endpoint's class (a WorkloadPriorityClass or PriorityClass the admin made, as a
    job's): it reclaims its standby domains only from borrowers not above it. Unset: the
    globalDefault PriorityClass, or 0."""
    scaling: Scaling | None = None
    """Autoscaling from Prometheus metrics."""
    rollout: Rollout = nested(Rollout)
    """Rollout limits, in replica groups."""
    port: int = Field(default=8000, ge=1, le=65535)
    """Port the leader serves on; the endpoint's Service targets it."""
    roles: Roles | None = None
    """Disaggregated serving: prefill and decode pools, each with its own shape and size,
    placed together in serving units (instead of replicaShape, replicas and scaling)."""
    multi_region: MultiRegion | None = None
    """Serve from several clusters (regions) through MultiKueue, on a MultiKueue manager:
    replicas, or the autoscaler's decision, are split over the regions and moved away
    from one that loses capacity or health."""
    managed_by: Literal["kueue.x-k8s.io/multikueue"] | None = Field(
        default=None, json_schema_extra=field_rules(immutable("managedBy")))
    """kueue.x-k8s.io/multikueue: on a MultiKueue manager, the operator only makes this
    endpoint's Workload; MultiKueue sends it to a worker cluster (the one its
    kueue.x-k8s.io/queue-name label's queue targets) and copies its status back. A
    multiRegion endpoint makes its replicas this way. Immutable."""

    def serving_roles(self) -> list[ServingRole]:
        """The roles to run: decode first (it anchors the units), or the one role."""
        if self.roles is None:
            assert self.replica_shape is not None  # the schema asks for one or the other
            return [ServingRole("", self.replica_shape, self.replicas, self.scaling)]
        return [ServingRole(name, role.replica_shape, role.replicas, role.scaling)
                for name in ROLE_NAMES for role in [getattr(self.roles, name)]]


@dataclass(frozen=True)
class ServingRole:
    """One pool of an endpoint: NAME is "" for a single-role endpoint."""

    name: str
    shape: ReplicaShape
    replicas: int | None
    scaling: Scaling | None

    def desired_default(self) -> int:
        """The size without the autoscaler's word."""
        return 1 if self.replicas is None else self.replicas


class ReplicaGroupStatus(ApiModel):
    """One replica group."""

    index: int = Field(ge=0)
    """Replica index."""
    domain: str | None = None
    """Domain hosting the group."""
    nodes: list[str] = Field(default_factory=list)
    """Nodes of the group, leader first."""
    ready: bool = False
    """All pods of the group are ready."""
    revision: str | None = None
    """Template revision the group runs."""
    role: Literal["prefill", "decode"] | None = None
    """The group's role (disaggregated endpoints only)."""


class ScalingDecision(ApiModel):
    """The last change the autoscaler decided."""

    time: datetime
    """When it was decided."""
    from_replicas: int = Field(ge=0, alias="from")
    """Replicas before."""
    to_replicas: int = Field(ge=0, alias="to")
    """Replicas after."""
    reason: str
    """Why (metric, window, limit)."""
    metrics: dict[str, str] = Field(default_factory=dict)
    """Metric values it was decided from."""
    role: Literal["prefill", "decode"] | None = None
    """The role it sized (disaggregated endpoints only)."""


class RoleStatus(ApiModel):
    """One role's replica groups (disaggregated endpoints)."""

    name: Literal["prefill", "decode"]
    """The role."""
    replicas: int = Field(default=0, ge=0)
    """Its replica groups that exist."""
    desired_replicas: int = Field(default=0, ge=0)
    """Its replica groups wanted now (its autoscaler's or its replicas, bounded by
    prefillPerDecode, and at least one prefill per unit)."""
    ready_replicas: int = Field(default=0, ge=0)
    """Its replica groups with every pod ready."""


class UnitStatus(ApiModel):
    """One serving unit: the decode and prefill groups inside one affinity scope."""

    scope: str
    """The domain (affinity Domain) or network block (NetworkBlock) it spans."""
    decode: list[int] = Field(default_factory=list)
    """Indexes of its decode groups."""
    prefill: list[int] = Field(default_factory=list)
    """Indexes of its prefill groups."""


class Reclaim(ApiModel):
    """A standby domain being taken back from the training jobs that borrowed it."""

    domain: str
    """The domain."""
    jobs: list[str] = Field(default_factory=list)
    """The borrowing TrainingJobs (namespace/name), asked to checkpoint and stop."""


class StandbyStatus(ApiModel):
    """The whole domains kept free for the endpoint's next replica groups."""

    domains: list[str] = Field(default_factory=list)
    """The domains held on standby (training jobs never take them unless nothing else
    fits, and only as preemptible capacity)."""
    lent: list[str] = Field(default_factory=list)
    """TrainingJobs (namespace/name) running on a standby domain now."""
    reclaim: Reclaim | None = None
    """The standby domain being taken back for a replica group that fits nowhere else."""


class RegionStatus(ApiModel):
    """One region of a multi-region endpoint, as its replicas report it."""

    name: str
    """The region."""
    replicas: int = Field(default=0, ge=0)
    """Replicas sent there."""
    ready_replicas: int = Field(default=0, ge=0)
    """Of them, ready."""
    room: int | None = Field(default=None, ge=0)
    """More replicas the region's cluster could host now, as its replicas last said."""
    cluster: str | None = None
    """The cluster that runs them (MultiKueue's worker)."""
    unavailable_until: datetime | None = None
    """A replica there failed over: no new replica goes there before this time."""
    message: str | None = None
    """Why it is unavailable."""
    traffic: Literal["Serving", "Drained", "Returning"] | None = None
    """With routing (the operator's `--haproxy-runtime-api`): whether the proxy sends it
    requests (Serving), none (Drained), or fewer while it comes back (Returning)."""
    traffic_weight: int | None = Field(default=None, ge=0, le=256)
    """Its weight in the proxy (0 to 256; the others' in proportion)."""
    traffic_since: datetime | None = None
    """In that traffic state since."""
    traffic_reason: str | None = None
    """Why it is in that state."""


class InferenceEndpointStatus(ApiModel):
    """Observed state of the endpoint, written by the operator."""

    observed_generation: int | None = None
    """The .metadata.generation this status was computed from."""
    replicas: int = Field(default=0, ge=0)
    """Replica groups that exist (the /scale subresource reads this)."""
    desired_replicas: int = Field(default=0, ge=0)
    """Replica groups wanted now."""
    ready_replicas: int = Field(default=0, ge=0)
    """Replica groups with every pod ready."""
    updated_replicas: int = Field(default=0, ge=0)
    """Replica groups on the current template."""
    selector: str | None = None
    """Label selector of the leader pods (for the /scale subresource and HPA)."""
    groups: list[ReplicaGroupStatus] = Field(default_factory=list)
    """Each replica group's placement and readiness."""
    roles: list[RoleStatus] = Field(default_factory=list)
    """Per role: groups existing, wanted and ready (disaggregated endpoints)."""
    units: list[UnitStatus] = Field(default_factory=list)
    """The serving units and their groups (disaggregated endpoints)."""
    standby: StandbyStatus | None = None
    """The warm standby (scaling.standbyDomains)."""
    last_scaling: ScalingDecision | None = None
    """The last scaling decision."""
    recent_scaling: list[ScalingDecision] = Field(default_factory=list,
                                                  max_length=MAX_RECENT_SCALING)
    """The most recent scaling decisions (newest last, at most 16)."""
    regions: list[RegionStatus] = Field(default_factory=list, max_length=MAX_REGIONS)
    """Per region, its replicas (multiRegion)."""
    room: int | None = Field(default=None, ge=0)
    """Under Kueue: how many more replica groups of this shape this cluster could host
    now (a multi-region endpoint on the manager reads it)."""
    cluster: str | None = None
    """The cluster whose operator wrote this status (its --cluster-name)."""
    workload: str | None = None
    """The Kueue Workload that holds this endpoint's quota."""
    conditions: list[Condition] = conditions_field()
    """Ready, Progressing, ScalingLimited (InsufficientCapacity, AtMaxReplicas;
    WaitingForTurn before its first placement search, while more of its namespace's
    endpoints wait than a pass searches: --searches-per-namespace; multi-region:
    ReplicaCreateRefused while a refused replica backs off), MetricsUnavailable, Panic,
    Standby, Admitted (under Kueue: Queued, Admitted, Evicted, WorkloadMissing,
    WorkloadRefused, KueueUnavailable) conditions."""
