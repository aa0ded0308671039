"""Status types generated from goodput_operator.api's pydantic models by `make generate`
(goodput_operator.api.typed); do not edit. Keys are the wire's (camelCase); every type is
total=False (a status write is a merge patch of the keys that change)."""

from __future__ import annotations

from typing import Literal, TypedDict


class ConditionDict(TypedDict, total=False):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    lastTransitionTime: str
    observedGeneration: int | None


class WorkerCountsDict(TypedDict, total=False):
    desired: int
    ready: int
    succeeded: int
    failed: int


class PlacementSliceDict(TypedDict, total=False):
    firstRank: int
    nodes: str
    domain: str | None


class PodSetPlacementDict(TypedDict, total=False):
    set: str
    index: int
    node: str
    domain: str | None


class PlacementDict(TypedDict, total=False):
    domains: list[str]
    domainSummary: str | None
    workers: int | None
    slices: list[PlacementSliceDict]
    podSets: list[PodSetPlacementDict]
    reason: str | None
    placedAt: str | None
    probeFirst: list[str]


class RestartsByBudgetDict(TypedDict, total=False):
    application: int
    infrastructure: int


class CheckpointRefDict(TypedDict, total=False):
    step: int
    path: str | None
    digest: str | None
    time: str | None
    saveSeconds: float | None


class CheckpointRecordDict(TypedDict, total=False):
    step: int
    path: str | None
    digest: str | None
    time: str | None
    saveSeconds: float | None
    verified: bool
    corrupt: str | None


class CheckpointStatusDict(TypedDict, total=False):
    latest: CheckpointRefDict | None
    latestVerified: CheckpointRefDict | None
    history: list[CheckpointRecordDict]


class ProgressDict(TypedDict, total=False):
    step: int
    rank: int | None
    restart: int | None
    time: str | None
    metrics: dict[str, float]
    every: int | None
    nonFinite: dict[str, Literal["NaN", "+Inf", "-Inf"]]


class SdcStatusDict(TypedDict, total=False):
    attempt: int
    verifiedStep: int | None
    divergedStep: int | None
    divergence: str | None
    guardedStep: int | None
    guard: str | None
    unverifiableSteps: int
    lastVote: str | None


class PreemptingDict(TypedDict, total=False):
    by: str
    at: str
    deadline: str
    message: str | None


class CheckpointAdviceDict(TypedDict, total=False):
    intervalSeconds: float
    saveSeconds: float
    mtbfSeconds: float
    nodeFailuresPerDay: float
    measuredSeconds: float | None


class NodeNoticeDict(TypedDict, total=False):
    node: str
    kind: str
    since: str
    deadline: str


class IncidentDict(TypedDict, total=False):
    restart: int
    cause: Literal["NodeFailure", "InfrastructureError", "ApplicationError", "SilentDataCorruption", "Unschedulable", "Hang", "Resize", "Preemption", "Notice"]
    message: str
    nodes: list[str]
    failedAt: str | None
    detectedAt: str | None
    restartAt: str | None
    replacedAt: str | None
    runningAt: str | None
    action: Literal["replace", "move", "shrink", "grow", "wait", "restart", "requeue"] | None
    resumeFrom: CheckpointRefDict | None
    detectionSeconds: float | None
    replacementSeconds: float | None
    restartSeconds: float | None
    lostWorkSeconds: float | None


class LostSecondsDict(TypedDict, total=False):
    detection: float
    replacement: float
    restart: float
    lostWork: float
    launch: float
    checkpoint: float


class IdleSecondsDict(TypedDict, total=False):
    queueing: float
    suspended: float


class StageDict(TypedDict, total=False):
    name: Literal["queueing", "launch", "suspended"]
    since: str


class GoodputDict(TypedDict, total=False):
    ratio: float | None
    productiveSeconds: float
    lostSeconds: LostSecondsDict
    lostByCause: dict[str, float]
    idleSeconds: IdleSecondsDict
    stage: StageDict | None
    stallsCountedTo: str | None
    since: str | None
    asOf: str | None


class TrainingJobStatusDict(TypedDict, total=False):
    observedGeneration: int | None
    phase: Literal["Pending", "Placing", "Running", "Recovering", "Succeeded", "Failed", "Suspended"] | None
    message: str | None
    conditions: list[ConditionDict]
    workers: WorkerCountsDict
    accelerators: int
    placement: PlacementDict | None
    restarts: int
    restartsByBudget: RestartsByBudgetDict | None
    checkpoint: CheckpointStatusDict
    progress: ProgressDict | None
    sdc: SdcStatusDict | None
    preemption: PreemptingDict | None
    checkpointAdvice: CheckpointAdviceDict | None
    notice: NodeNoticeDict | None
    incidents: list[IncidentDict]
    goodput: GoodputDict
    startTime: str | None
    completionTime: str | None
    cluster: str | None
    workload: str | None


class ReplicaGroupStatusDict(TypedDict, total=False):
    index: int
    domain: str | None
    nodes: list[str]
    ready: bool
    revision: str | None
    role: Literal["prefill", "decode"] | None


class RoleStatusDict(TypedDict, total=False):
    name: Literal["prefill", "decode"]
    replicas: int
    desiredReplicas: int
    readyReplicas: int


class UnitStatusDict(TypedDict, total=False):
    scope: str
    decode: list[int]
    prefill: list[int]


class ReclaimDict(TypedDict, total=False):
    domain: str
    jobs: list[str]


class StandbyStatusDict(TypedDict, total=False):
    domains: list[str]
    lent: list[str]
    reclaim: ReclaimDict | None


ScalingDecisionDict = TypedDict("ScalingDecisionDict", {
    "time": str,
    "from": int,
    "to": int,
    "reason": str,
    "metrics": dict[str, str],
    "role": Literal["prefill", "decode"] | None,
}, total=False)


class RegionStatusDict(TypedDict, total=False):
    name: str
    replicas: int
    readyReplicas: int
    room: int | None
    cluster: str | None
    unavailableUntil: str | None
    message: str | None
    traffic: Literal["Serving", "Drained", "Returning"] | None
    trafficWeight: int | None
    trafficSince: str | None
    trafficReason: str | None


class InferenceEndpointStatusDict(TypedDict, total=False):
    observedGeneration: int | None
    replicas: int
    desiredReplicas: int
    readyReplicas: int
    updatedReplicas: int
    selector: str | None
    groups: list[ReplicaGroupStatusDict]
    roles: list[RoleStatusDict]
    units: list[UnitStatusDict]
    standby: StandbyStatusDict | None
    lastScaling: ScalingDecisionDict | None
    recentScaling: list[ScalingDecisionDict]
    regions: list[RegionStatusDict]
    room: int | None
    cluster: str | None
    workload: str | None
    conditions: list[ConditionDict]


class GroupTotalsDict(TypedDict, total=False):
    domains: int
    healthyDomains: int
    nodes: int
    readyNodes: int
    accelerators: int
    freeAccelerators: int
    quarantined: int
    spares: int
    standbyDomains: int


class DomainStatusDict(TypedDict, total=False):
    id: str
    health: Literal["Healthy", "Degraded", "Failed"]
    nodesReady: int
    nodesTotal: int
    freeAccelerators: int
    quarantinedNodes: list[str]
    spares: list[str]
    standbyFor: str | None


class IgnoredPodDict(TypedDict, total=False):
    pod: str
    node: str
    reason: str


class HeldEvidenceDict(TypedDict, total=False):
    node: str
    reason: str
    owner: str
    since: str
    evidence: str
    notBefore: str | None


class BadputSecondsDict(TypedDict, total=False):
    launch: float
    detection: float
    replacement: float
    restart: float
    lostWork: float
    checkpoint: float


class NamespaceAccountDict(TypedDict, total=False):
    namespace: str
    productive: float
    serving: float
    standby: float
    badput: BadputSecondsDict
    total: float


class AccountingDict(TypedDict, total=False):
    since: str | None
    asOf: str | None
    acceleratorSeconds: float
    productive: float
    serving: float
    badput: BadputSecondsDict
    idle: float
    standby: float
    spare: float
    quarantined: float
    unavailable: float
    other: float
    unobserved: float
    namespaces: list[NamespaceAccountDict]
    namespacesOmitted: int


class UltraServerGroupStatusDict(TypedDict, total=False):
    observedGeneration: int | None
    health: Literal["Healthy", "Degraded", "Failed", "Empty"] | None
    totals: GroupTotalsDict
    domains: list[DomainStatusDict]
    domainsOmitted: int
    ignoredPods: list[IgnoredPodDict]
    ignoredPodsOmitted: int
    heldEvidence: list[HeldEvidenceDict]
    heldEvidenceOmitted: int
    accounting: AccountingDict | None
    conditions: list[ConditionDict]
