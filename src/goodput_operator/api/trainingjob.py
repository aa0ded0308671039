"""TrainingJob: a gang of workers placed topology-aware, restarted from verified checkpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from goodput_operator.api.base import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    ApiModel,
    Condition,
    PodTemplate,
    cel,
    conditions_field,
    field_rules,
    immutable,
    nested,
    rules,
)

MAX_WORKERS = 8192  # a gang's largest size (see TrainingJobSpec.workers)
MAX_SLICE_HOSTS = 1024  # a slice's most workers (topology.slice.size; launcher jax's hosts)
Phase = Literal["Pending", "Placing", "Running", "Recovering", "Succeeded", "Failed", "Suspended"]
PHASES: tuple[str, ...] = Phase.__args__  # type: ignore[attr-defined]


class Launcher(ApiModel):
    """How workers start their processes; the operator sets the matching environment."""

    type: Literal["torchrun", "neuron", "mpi", "jax", "none"] = "torchrun"
    """torchrun: MASTER_ADDR/PORT, NNODES, NODE_RANK, NPROC_PER_NODE, WORLD_SIZE; neuron:
    torchrun plus NEURON_RT_ROOT_COMM_ID and EFA settings (docs/training.md: the fabric);
    mpi: Open MPI's mpirun on rank 0
    finds the gang's hostfile by itself (OMPI_MCA_orte_default_hostfile,
    PRTE_MCA_prte_default_hostfile); jax: JAX on TPU slices, TPU_WORKER_ID and
    TPU_WORKER_HOSTNAMES within the worker's slice (topology.slice, else the whole gang)
    and, over several slices, MEGASCALE_COORDINATOR_ADDRESS, MEGASCALE_PORT,
    MEGASCALE_NUM_SLICES and MEGASCALE_SLICE_ID; none: only the GOODPUT_* variables and
    the hostfile."""
    port: int = Field(default=29500, ge=1, le=65534)
    """Rendezvous port on rank 0 (the Neuron runtime's root communicator takes the next
    one, so at most 65534; jax: the multislice coordinator's, MEGASCALE_PORT)."""
    procs_per_worker: int | None = Field(default=None, ge=1, le=1024)
    """Processes per worker (NPROC_PER_NODE); defaults to acceleratorsPerWorker."""


class Slice(ApiModel):
    """Slices of the gang: runs of consecutive ranks, each inside one domain."""

    unit: Literal["domain"] = "domain"
    """Where each slice must stay: one domain (UltraServer / NVLink domain)."""
    size: int = Field(ge=1, le=MAX_SLICE_HOSTS)
    """Workers per slice; spec.workers must be a multiple of it."""


class Topology(ApiModel):
    """Where the gang may go and in what order its ranks follow the fabric."""

    unit: Literal["node", "domain", "block"] = "domain"
    """The unit the gang is packed into: node (any nodes), domain (UltraServer / NVLink
    domain: fewest domains), or block (network block: one block)."""
    policy: Literal["required", "preferred"] = "required"
    """required: wait until the gang fits as asked; preferred: place anyway, spanning as
    few units and network levels as possible."""
    slice: Slice | None = None
    """Multi-layer placement: the gang in slices of `size` workers, each slice inside one
    domain, while `unit` holds for the whole gang (unit block with slices of 4 on Trn2: 4
    whole UltraServers in one network block; slices of 16 on NVL72: one per 18-node rack).
    Domains are chosen, balanced and replaced in whole slices; a slice fits a domain by
    what its nodes really hold (nodes larger than the group's perNode count as such)."""
    balance: bool = False
    """true: a gang that spans several domains is split evenly over them (counts differ
    by at most one: 6+6, not 10+2), over the fewest domains that allow such a split, so
    that collectives see symmetric domains; a failed rank is replaced only inside its own
    domain (else the gang moves or shrinks, evenly). With policy required the gang waits
    while the fewest domains it needs cannot take an even split. With unit block and
    policy preferred, staying inside one block comes first: unevenly in a block before
    evenly across blocks."""
    rank_order: Literal["fabric", "index"] = "fabric"
    """fabric: ranks follow network level, domain, then slot, so consecutive ranks are
    physical neighbours; index: ranks follow the placed nodes' names (natural order, as
    `kubectl get nodes` lists them), for launchers that expect that."""


MAX_INCIDENTS = 32  # status.incidents: the newest kept
MAX_CHECKPOINT_HISTORY = 16  # status.checkpoint.history: the newest kept
MAX_POD_SETS = 4  # companion pod sets per job (a launcher, a leader, parameter servers)


class PodSet(ApiModel):
    """Pods placed together with the workers, in the same decision (all or none): an MPI
    launcher, a CPU-only driver or leader, parameter servers. They get the gang's
    environment and hostfile but no rank, live and restart with the gang's attempts, and
    stay `near` the workers."""

    name: str = Field(max_length=24, pattern=DNS_LABEL, json_schema_extra=field_rules(
        cel("self != 'workers'", "podSets[].name: 'workers' is the workers' own pod set "
            "(in the job's Kueue Workload too): choose another name")))
    """The set's name (not `workers`): its pods are <job>-r<restart>-<name>-<i>, host
    <name>-<i> of the job's service, with GOODPUT_POD_SET=<name> and GOODPUT_POD_INDEX=<i>."""
    replicas: int = Field(default=1, ge=1, le=16)
    """Pods in the set."""
    accelerators_per_pod: int = Field(default=0, ge=0, le=1024)
    """Accelerators each pod requests; 0: none (a CPU-only pod)."""
    near: Literal["domain", "block", "any"] = "domain"
    """Where the set's pods must land: domain, one of the workers' domains (UltraServer /
    NVLink domain); block, one of their network blocks; any, anywhere in the group."""
    template: PodTemplate | None = None
    """The set's pod; unset: the workers' template."""
    node_selector: dict[str, str] | None = Field(default=None, max_length=32)
    """Labels its nodes must carry besides the group's (placement honours it, as it honours
    the template's node affinity, tolerations and requests)."""


class Elastic(ApiModel):
    """How far the job may shrink when nodes are lost and no replacement keeps its size:
    down to minWorkers, in steps; and when it grows back toward spec.workers, its most.
    Every resize restarts the whole gang at the new size from the last checkpoint, so
    every worker sees the same WORLD_SIZE, NNODES and hostfile."""

    min_workers: int = Field(ge=1, le=MAX_WORKERS)
    """Fewest workers the job may run with."""
    step: int = Field(default=1, ge=1, le=100_000)
    """Worker counts change in multiples of this, down from spec.workers (e.g. nodes per
    domain, so that the gang shrinks and grows by whole domains)."""
    grow_after_seconds: int = Field(default=300, ge=0, le=86_400)
    """A shrunk job grows back (to the largest size in steps that fits, up to
    spec.workers) once it has run this long at its current size and the larger gang fits:
    the hysteresis that keeps a flapping node from resizing the gang at every beat. Each
    grow is a restart (incident cause Resize, paid from no budget)."""


class Checkpoint(ApiModel):
    """Where checkpoints live and whether only verified ones are resumed from."""

    model_config = rules(
        cel("!has(self.credentialsSecret) || (has(self.dir) && self.dir.startsWith('s3://'))",
            "credentialsSecret is for an object store: set dir to s3://bucket/prefix",
            ".credentialsSecret"),
        cel("!has(self.sharedDir) || (has(self.dir) && self.dir.startsWith('s3://'))",
            "sharedDir is the tier between the node-local copy and an object store: set dir "
            "to s3://bucket/prefix", ".sharedDir"),
    )

    dir: str | None = Field(default=None, min_length=1, max_length=4096)
    """Directory or URI (s3://bucket/prefix, /fsx/...) the job writes checkpoints to; passed
    to workers as GOODPUT_CHECKPOINT_DIR. The SDK saves to s3:// through a node-local copy
    and a commit object per step (docs/recovery.md#checkpoints-on-an-object-store)."""
    credentials_secret: str | None = Field(default=None, max_length=253,
                                           pattern=DNS_SUBDOMAIN)
    """A Secret in the job's namespace holding the object store's AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY (and, if set, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL):
    every worker gets them as environment variables (the kubelet reads the Secret; the
    operator never does). Only with an s3:// dir."""
    shared_dir: str | None = Field(default=None, min_length=2, max_length=4096,
                                   pattern=r"^/")
    """A folder every node mounts (FSx for Lustre, EFS, NFS), the tier between the
    node-local copy and the object store: each step is copied there and committed by a
    commit object of its own before it is uploaded, and a resume reads it from there when
    it holds the step as committed (docs/recovery.md#checkpoints-on-an-object-store);
    passed to workers as GOODPUT_CHECKPOINT_SHARED. Only with an s3:// dir."""
    verify: bool = False
    """Resume only from checkpoints whose step the replicas' fingerprints agreed on
    (needs sdc.crossReplicaCheck); false: from the newest committed one."""


class Backoff(ApiModel):
    """Exponential backoff between restarts."""

    model_config = rules(
        cel("self.initialSeconds <= self.maxSeconds",
            "backoff.initialSeconds must be <= backoff.maxSeconds", ".initialSeconds"),
    )

    initial_seconds: int = Field(default=10, ge=0, le=86_400)
    """Delay before the first restart; doubles each restart."""
    max_seconds: int = Field(default=600, ge=0, le=86_400)
    """Longest delay between restarts."""


class ExitCodeRule(ApiModel):
    """What a worker's exit code means."""

    codes: list[Annotated[int, Field(ge=0, le=255)]] = Field(min_length=1, max_length=64)
    """Exit codes this rule matches (0..255)."""
    action: Literal["restart", "probe", "fail", "ignore"]
    """restart: an application error, restart the gang (counts against maxRestarts);
    probe: the worker's node is suspect (device, fabric): the gang restarts once the SDC
    probe has checked that node, on a replacement if the probe quarantines it (a job asks
    for at most 3 such probes; a tenant's exit code never quarantines a node by itself);
    fail: fail the job; ignore: leave the job running."""


class HangDetection(ApiModel):
    """When a job that reports steps is hung: no new step for max(stepTimeMultiple x its
    recent median time per step, minSeconds). In force from the attempt's first step
    report (goodput_operator.sdk.report_step); a job that never reports is not judged."""

    enabled: bool = True
    """false: a job whose steps stop stays Running, as one that reports none."""
    step_time_multiple: int = Field(default=10, ge=2, le=10_000)
    """k: how many median step times without a new step make a hang."""
    min_seconds: int = Field(default=600, ge=10, le=86_400)
    """The shortest window: longer than a checkpoint save or a compilation that stops
    the steps (Neuron compiles can take minutes: raise it for them)."""


class StragglerDetection(ApiModel):
    """Straggler detection from step reports: one rank persistently slower than its peers
    (a throttled device, a bad link) sets the pace of a synchronous gang."""

    enabled: bool = True
    """Compare the ranks' paces (the Straggler condition says what was compared); false:
    off. Jobs whose workers report no steps are not judged."""
    factor: float = Field(default=1.5, ge=1.1, le=100)
    """A rank whose median seconds per step exceed this multiple of its peers' median is a
    straggler (when the excess is at least 5% of the gang's step: below, it costs nothing
    worth acting on)."""
    min_steps: int = Field(default=16, ge=3, le=32)
    """Steps of each rank the medians need before anything is judged (a few slow steps
    are not a straggler)."""
    action: Literal["report", "quarantine"] = "report"
    """report: a Straggler condition and event name the rank and its node; quarantine:
    also quarantine the node (reason Straggler, within the group's quarantine budget) so
    that the rank moves to a spare, and probe it: clean SDC probe runs release it, as for
    corruption."""


class FailurePolicy(ApiModel):
    """Restart budget, backoff, node replacement and exit-code rules."""

    max_restarts: int = Field(default=10, ge=0, le=10_000)
    """Restarts for the application's own failures (a worker exits non-zero: exit codes
    not classified as the platform's) before the job fails. Node failures, quarantines,
    unschedulable nodes, corruption and hangs on a bad node use maxInfrastructureRestarts
    instead: the platform's faults do not use up the user's budget."""
    max_infrastructure_restarts: int = Field(default=50, ge=0, le=10_000)
    """Restarts for the platform's faults (NodeFailure, Unschedulable,
    SilentDataCorruption, InfrastructureError) before the job fails: a job that cannot
    stay up on this fleet stops holding it."""
    backoff: Backoff = nested(Backoff)
    """Delay between restarts."""
    node_replacement: Literal["any", "spare", "wait"] = "any"
    """any: a failed rank goes to a spare, else to a free node the topology policy allows
    (same domain first), the other ranks staying where they are; spare: to a spare only,
    else the whole gang is placed again (spares counting, its own healthy nodes too), shrunk
    or left waiting; wait: nothing is replaced: the gang is placed again, whole, once it
    fits (spares counting)."""
    exit_codes: list[ExitCodeRule] = Field(default_factory=list, max_length=32)
    """Rules by exit code, first match wins; unmatched non-zero codes restart."""
    hang: HangDetection = nested(HangDetection)
    """Hang detection from step reports: a hung attempt restarts the gang from the last
    checkpoint (incident cause Hang, paid from maxRestarts: no node is to blame)."""
    straggler: StragglerDetection = nested(StragglerDetection)
    """Straggler detection from step reports (workers that report `computeSeconds`, their
    own time per step without collectives, are compared by it; else by the time between
    their reports)."""


class Sdc(ApiModel):
    """Silent-data-corruption defences."""

    cross_replica_check: bool = False
    """Compare data-parallel replicas' fingerprints at each reported step; a minority that
    disagrees marks its node suspect. With checkpoint.verify, only checkpoints whose step
    the replicas agreed on are resumed from."""
    shards: int = Field(default=1, ge=1, le=100_000)
    """Model-parallel shards per replica: ranks reporting the same shard (the SDK's
    `shard`) at a step are data-parallel replicas and must agree; there are
    workers / shards of them. 1: every rank holds the whole model."""
    probe_on_start: bool = False
    """Run the SDC probe on each placed node before the workers start (each restart too);
    a node that fails it is quarantined and replaced."""
    loss_spike_factor: float | None = Field(default=None, gt=1, le=1000)
    """A loss above this multiple of its recent median counts as evidence against the step."""


class TrainingJobSpec(ApiModel):
    """What to run, on how many accelerators, and how to keep it alive."""

    model_config = rules(
        cel("!has(self.elastic) || self.workers >= self.elastic.minWorkers",
            "workers must be at least elastic.minWorkers", ".workers"),
        cel("!has(self.topology.slice) || self.workers % self.topology.slice.size == 0",
            "workers must be a multiple of topology.slice.size", ".workers"),
        cel("!has(self.topology.slice) || self.topology.rankOrder == 'fabric'",
            "topology.slice needs rankOrder fabric: ranks in name order would mix the "
            "slices' domains", ".topology.rankOrder"),
        cel("!has(self.topology.slice) || !has(self.elastic) || "
            "(self.elastic.step % self.topology.slice.size == 0 && "
            "self.elastic.minWorkers % self.topology.slice.size == 0)",
            "elastic.step and elastic.minWorkers must be multiples of topology.slice.size: "
            "the gang shrinks and grows in whole slices", ".elastic"),
        cel("self.launcher.type != 'jax' || (has(self.topology.slice) ? "
            f"self.topology.slice.size : self.workers) <= {MAX_SLICE_HOSTS}",
            f"launcher jax lists a slice's hosts in each of its pods: at most "
            f"{MAX_SLICE_HOSTS} (set topology.slice.size for several slices)", ".launcher"),
        cel("!self.checkpoint.verify || self.sdc.crossReplicaCheck",
            "checkpoint.verify needs sdc.crossReplicaCheck: only the replicas' votes verify "
            "a checkpoint", ".checkpoint.verify"),
        cel("!has(self.launcher.procsPerWorker) || "
            "self.launcher.procsPerWorker <= self.acceleratorsPerWorker * 8",
            "launcher.procsPerWorker must be <= 8 x acceleratorsPerWorker",
            ".launcher.procsPerWorker"),
        cel("self.sdc.shards <= self.workers",
            "sdc.shards must be <= workers: with more shards than workers no shard has two "
            "replicas to compare, and every step would look unanimous", ".sdc.shards"),
        cel("self.failurePolicy.maxRestarts <= 10 || "
            "self.failurePolicy.backoff.initialSeconds >= 1",
            "failurePolicy.backoff.initialSeconds must be at least 1 when maxRestarts is "
            "above 10: a zero backoff deletes and recreates the whole gang in a loop",
            ".failurePolicy.backoff.initialSeconds"),
        cel("has(self.managedBy) == has(oldSelf.managedBy)",
            "managedBy cannot be added or removed once the job exists", ".managedBy",
            reason="FieldValueForbidden"),
    )

    ultra_server_group: str = Field(
        max_length=253, pattern=DNS_SUBDOMAIN,
        json_schema_extra=field_rules(immutable("ultraServerGroup")),
    )
    """The UltraServerGroup to run in (its topology drives placement)."""
    node_selector: dict[str, str] | None = Field(default=None, max_length=32)
    """Labels the nodes must carry besides the group's: narrows the group (placement
    honours it, as it honours the template's node affinity, tolerations and requests)."""
    workers: int = Field(ge=1, le=MAX_WORKERS)
    """Worker pods, one per node; at most 8192 (64k H100s at 8 a node, 128k Trainium2 chips
    at 16: beyond the largest single training jobs run; the gang's hostfile and placement
    record must stay within etcd's object size)."""
    accelerators_per_worker: int = Field(
        ge=1, le=1024, json_schema_extra=field_rules(immutable("acceleratorsPerWorker")),
    )
    """Accelerators each worker requests (a whole node is 16 on trn2, 8 on p5, 4 on GB200)."""
    template: PodTemplate
    """The worker pod."""
    launcher: Launcher = nested(Launcher)
    """Process launcher and its port."""
    topology: Topology = nested(Topology, **field_rules(immutable("topology")))
    """Placement unit, policy and rank order."""
    elastic: Elastic | None = None
    """Optional bounds for shrinking instead of waiting when capacity is lost."""
    pod_sets: list[PodSet] = Field(
        default_factory=list, max_length=MAX_POD_SETS,
        json_schema_extra={"x-kubernetes-list-type": "map",
                           "x-kubernetes-list-map-keys": ["name"], "default": [],
                           **field_rules(immutable("podSets"))})  # the default: old objects
    # have the list too, so that the rule compares an added set with the empty one
    """Pod sets placed together with the workers (a launcher or leader beside them), each
    `near` them; at most 4, names unique."""
    checkpoint: Checkpoint = nested(Checkpoint)
    """Checkpoint location and verification."""
    failure_policy: FailurePolicy = nested(FailurePolicy)
    """Restart budget, backoff, replacement and exit-code rules."""
    sdc: Sdc = nested(Sdc)
    """Silent-data-corruption checks."""
    priority_class_name: str | None = Field(
        default=None, min_length=1, max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    """The job's priority: a Kueue WorkloadPriorityClass, or else a PriorityClass, of this
    name (both made by the admin); unset: the globalDefault PriorityClass, or 0. Higher
    classes are placed first, and only a class the admin marked
    `goodput.dev/preempt-across-namespaces` preempts other namespaces' jobs. A class that
    is missing, or whose `goodput.dev/namespaces` annotation leaves this namespace out,
    keeps the job Pending (Placed reason PriorityClassNotFound / PriorityClassNotAllowed).
    A PriorityClass is also written into the pods and the Kueue Workload."""
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000)
    """Order among this namespace's own jobs of the same class value (higher first; equal
    by arrival), and preemption among them. It never orders or preempts another
    namespace's jobs: that takes priorityClassName (docs/security.md, migration)."""
    preemption_policy: Literal["Never", "LowerPriority"] = "Never"
    """LowerPriority: a gang that does not fit preempts the smallest set of lower-priority
    jobs of its group whose removal lets it be placed as its topology asks (whole
    domains, aligned slices), never victims scattered over the fleet (searched exactly
    within a budget; past it a minimal set, and the Placed message says so); Never: it
    waits."""
    preemption_grace_seconds: int = Field(default=120, ge=0, le=3600)
    """When this job is preempted: how long its workers may take to save a checkpoint
    (the report channel asks them to, sdk.save_requested) before they are stopped; it
    then resumes from that checkpoint once placed again. 0, or no checkpoint.dir: stopped
    at once. A preemptor of another namespace waits at most 300 s of it."""
    borrow_standby: bool = False
    """True: when nothing else fits, the gang may run on domains an InferenceEndpoint keeps
    on warm standby (scaling.standbyDomains), and is stopped, after its checkpoint grace
    (preemptionGraceSeconds), when that endpoint reclaims them for a replica group; never
    by an endpoint of a lower class than this job's. False: it never borrows."""
    suspend: bool = False
    """True stops the workers (keeping checkpoints); false resumes."""
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0, le=31_536_000)
    """Delete the job this long after it Succeeded or Failed; unset keeps it."""
    managed_by: Literal["kueue.x-k8s.io/multikueue"] | None = Field(
        default=None, json_schema_extra=field_rules(immutable("managedBy")))
    """Who runs the job. Unset: the operator of this cluster.
    kueue.x-k8s.io/multikueue (on a MultiKueue manager cluster): the operator here only
    makes the job's Kueue Workload; MultiKueue sends a copy to the worker cluster that
    admits it, where that cluster's operator runs it, and copies its status back
    (status.cluster names that cluster). Needs a kueue.x-k8s.io/queue-name label naming a
    LocalQueue whose ClusterQueue has a MultiKueue admission check. Immutable
    (docs/multicluster.md)."""


class PlacementSlice(ApiModel):
    """Consecutive ranks in one domain: ranks firstRank, firstRank+1, ... on the nodes the
    hostlist names, in order."""

    first_rank: int = Field(ge=0, le=8191)
    """The slice's first rank."""
    nodes: str = Field(min_length=1)
    """The nodes of the slice's ranks in rank order, as a hostlist: consecutive names that
    differ in one number are written once with that number's ranges in brackets
    (`trn2-us-0007-n[0-3]` for n0, n1, n2, n3), other names are listed, comma separated."""
    domain: str | None = None
    """The slice's domain."""


class PodSetPlacement(ApiModel):
    """Where one pod of a companion pod set (spec.podSets) runs."""

    set: str
    """The pod set's name."""
    index: int = Field(ge=0, le=15)
    """The pod's index in its set."""
    node: str
    """Its node."""
    domain: str | None = None
    """The node's domain."""


class Placement(ApiModel):
    """The gang's placement, compact: the domains spanned and slices of consecutive ranks
    per domain (not one entry per rank, so that an 8192-worker record stays small)."""

    domains: list[str] = Field(default_factory=list)
    """Domains the gang occupies."""
    domain_summary: str | None = None
    """The domains for `kubectl get`'s DOMAINS column: up to three names, then how many
    more (`us-0001,us-0002,us-0003 +126`), so a large gang's row stays one line."""
    workers: int | None = Field(default=None, ge=0, le=8192)
    """Ranks placed (the sum of the slices' lengths)."""
    slices: list[PlacementSlice] = Field(default_factory=list, max_length=8192)
    """The ranks in rank order, a slice per run of consecutive ranks in one domain
    (`goodput_operator.topology.record.ranks_of` reads them back one entry per rank)."""
    pod_sets: list[PodSetPlacement] = Field(default_factory=list, max_length=64)
    """The companion pod sets' pods (spec.podSets), placed in the same decision."""
    reason: str | None = None
    """Why this placement (or why none was possible)."""
    placed_at: datetime | None = None
    """When it was made (probes before start must be newer)."""
    probe_first: list[str] = Field(default_factory=list, max_length=8)
    """Nodes an exit code made suspect (failurePolicy.exitCodes action probe): the gang
    starts on them only after a clean probe newer than placedAt."""


class CheckpointRef(ApiModel):
    """A checkpoint a worker committed."""

    step: int = Field(ge=0)
    """Training step."""
    path: str | None = None
    """Where it was written."""
    digest: str | None = None
    """The worker's digest of its contents (e.g. sha256:...), to verify it on resume."""
    time: datetime | None = None
    """When it was committed."""
    save_seconds: float | None = Field(default=None, ge=0)
    """How long its save stalled training, as the worker timed it (the SDK does)."""


class Progress(ApiModel):
    """The report of the newest step the workers reported (a report of an older step, sent
    later at its rank's phase, does not replace it)."""

    step: int = Field(ge=0)
    """Training step."""
    rank: int | None = None
    """The reporting worker's rank."""
    restart: int | None = Field(default=None, ge=0)
    """The attempt (status.restarts) it came from: hang detection carries on from it
    after an operator restart."""
    time: datetime | None = None
    """When it was reported."""
    metrics: dict[str, float] = Field(default_factory=dict)
    """Numbers the worker reported with it (loss, tokens/s, ...), the finite ones."""
    every: int | None = Field(default=None, ge=1)
    """The job's workers report every this many steps (and every step a checkpoint is
    taken at), as the operator asks to keep a large gang at about 500 reports a second;
    absent: every step."""
    non_finite: dict[str, Literal["NaN", "+Inf", "-Inf"]] = Field(default_factory=dict)
    """Numbers it reported that were NaN or infinite, by name: JSON (and so the API server)
    has no such numbers, and they are the very evidence the SDC guard looks for."""


class CheckpointRecord(CheckpointRef):
    """A committed checkpoint and whether it is verified."""

    verified: bool = False
    """Its step's fingerprints agreed and no divergence or guard came at or before it."""
    corrupt: str | None = None
    """Why a worker found it is not what was committed (its digest differs on load): it
    is never resumed from again."""


class CheckpointStatus(ApiModel):
    """Latest and latest verified checkpoints."""

    latest: CheckpointRef | None = None
    """The newest committed checkpoint not found corrupt."""
    latest_verified: CheckpointRef | None = None
    """The newest checkpoint whose step passed the cross-replica checks (every checkpoint
    when the job does not check replicas): the one a restart resumes from."""
    history: list[CheckpointRecord] = Field(default_factory=list,
                                           max_length=MAX_CHECKPOINT_HISTORY)
    """The most recent checkpoints of this attempt (newest last, at most 16)."""


class SdcStatus(ApiModel):
    """What the cross-replica checks and guards saw in the current attempt."""

    attempt: int = Field(default=0, ge=0)
    """The restart these observations belong to."""
    verified_step: int | None = None
    """Newest step every replica group agreed on."""
    diverged_step: int | None = None
    """First step where a replica disagreed with the majority."""
    divergence: str | None = None
    """The evidence: ranks, nodes, fingerprints."""
    guarded_step: int | None = None
    """First step a numeric guard fired on (NaN/Inf, loss spike)."""
    guard: str | None = None
    """What the guard saw."""
    unverifiable_steps: int = Field(default=0, ge=0)
    """Steps without a majority (ties, missing reports)."""
    last_vote: str | None = None
    """The latest vote, in words."""


IncidentCause = Literal["NodeFailure", "InfrastructureError", "ApplicationError",
                        "SilentDataCorruption", "Unschedulable", "Hang", "Resize",
                        "Preemption", "Notice"]
IncidentAction = Literal["replace", "move", "shrink", "grow", "wait", "restart", "requeue"]


class Incident(ApiModel):
    """One interruption of the gang and what it cost, phase by phase."""

    restart: int = Field(ge=1)
    """The restart (GOODPUT_RESTART) that recovers from it."""
    cause: IncidentCause
    """NodeFailure (a node of the gang failed), InfrastructureError (a worker's exit code
    made its node suspect), ApplicationError (a worker failed on a healthy node),
    SilentDataCorruption, Unschedulable (kube-scheduler refused a pinned worker on its
    node for 30 s: the ranks there are placed again elsewhere), Hang (every worker
    running, but no new step for failurePolicy.hang's window), or Resize (an elastic job
    grown back toward spec.workers: planned, paid from no budget), or Notice (a node of the
    gang was about to go: a Spot interruption, maintenance, Karpenter's disruption or a
    drain; the gang saved, and the ranks there moved before it went)."""
    message: str = ""
    """What happened, with the evidence."""
    nodes: list[str] = Field(default_factory=list)
    """Nodes blamed (quarantined) for it."""
    failed_at: datetime | None = None
    """When the failure began (node NotReady, worker exit)."""
    detected_at: datetime | None = None
    """When the operator acted on it."""
    restart_at: datetime | None = None
    """Earliest restart (exponential backoff after application errors)."""
    replaced_at: datetime | None = None
    """When the new placement (spares, moved gang) was written."""
    running_at: datetime | None = None
    """When every worker of the restart ran again; unset while recovering."""
    action: IncidentAction | None = None
    """replace: failed ranks moved to spares/free nodes keeping the topology; move: the
    whole gang moved; shrink: fewer workers (elastic); grow: more workers again (elastic);
    wait: no capacity yet; restart: same nodes; requeue: preempted, placed again when it
    fits."""
    resume_from: CheckpointRef | None = None
    """The checkpoint the restart resumes from."""
    detection_seconds: float | None = Field(default=None, ge=0)
    """failedAt to detectedAt."""
    replacement_seconds: float | None = Field(default=None, ge=0)
    """detectedAt to replacedAt (including backoff and waiting for capacity)."""
    restart_seconds: float | None = Field(default=None, ge=0)
    """replacedAt to runningAt."""
    lost_work_seconds: float | None = Field(default=None, ge=0)
    """Work done since the resumed checkpoint, redone after the restart."""


class LostSeconds(ApiModel):
    """Badput by where it went, in seconds: time the job held accelerators to no use."""

    detection: float = Field(default=0, ge=0)
    """From failure to its detection."""
    replacement: float = Field(default=0, ge=0)
    """From detection to a replacement being placed."""
    restart: float = Field(default=0, ge=0)
    """From placement to all workers running again."""
    lost_work: float = Field(default=0, ge=0)
    """Work redone since the checkpoint resumed from (the rollback)."""
    launch: float = Field(default=0, ge=0)
    """From a placement made while no incident was open (the first, or after a
    suspension) to every worker running: images, probes, rendezvous."""
    checkpoint: float = Field(default=0, ge=0)
    """Training stalled saving checkpoints (the SDK's timing of each committed save)."""


class IdleSeconds(ApiModel):
    """Time the job held no accelerators, in seconds: not in the ratio."""

    queueing: float = Field(default=0, ge=0)
    """Waiting for a placement: after creation, and after a suspension ends."""
    suspended: float = Field(default=0, ge=0)
    """Suspended (spec.suspend), when no incident was open."""


class Stage(ApiModel):
    """The stage a job that is neither running nor recovering waits in, and since when."""

    name: Literal["queueing", "launch", "suspended"]
    """queueing (Pending), launch (Placing) or suspended."""
    since: datetime
    """When it began."""


class Goodput(ApiModel):
    """Goodput accounting: productive seconds against seconds lost."""

    ratio: float | None = Field(default=None, ge=0, le=1)
    """productiveSeconds / (productiveSeconds + lost): useful accelerator time per
    accelerator time held (queueing and suspension hold none)."""
    productive_seconds: float = Field(default=0, ge=0)
    """Seconds all workers ran useful steps, the running stretch counted up to asOf."""
    lost_seconds: LostSeconds = nested(LostSeconds)
    """Seconds lost, by recovery phase, launch and checkpoint stalls."""
    lost_by_cause: dict[str, float] = Field(default_factory=dict)
    """Seconds lost to incidents (all phases), by incident cause."""
    idle_seconds: IdleSeconds = nested(IdleSeconds)
    """Seconds holding no accelerators. productive + lost + idle (and the open stage's
    and incident's time) is the job's wall time: every second is accounted for."""
    stage: Stage | None = None
    """The stage the job waits in now, if any (closed into its bucket when it ends)."""
    stalls_counted_to: datetime | None = None
    """The newest checkpoint commit whose save stall lostSeconds.checkpoint counts."""
    since: datetime | None = None
    """Start of the current productive stretch (all workers running); unset while not."""
    as_of: datetime | None = None
    """When productiveSeconds and ratio were computed: while the job runs, with every
    status write and at least every 30 s, so the ratio a user reads is current (with more
    than 60 jobs running, every (running jobs / 2) s: refreshes alone stay at 2 writes/s)."""


class WorkerCounts(ApiModel):
    """Workers by state."""

    desired: int = Field(default=0, ge=0)
    """Workers the job should have now."""
    ready: int = Field(default=0, ge=0)
    """Workers running and ready."""
    succeeded: int = Field(default=0, ge=0)
    """Workers that exited 0."""
    failed: int = Field(default=0, ge=0)
    """Workers that failed in the current attempt."""


class RestartsByBudget(ApiModel):
    """Restarts so far, by whose fault they were."""

    application: int = Field(default=0, ge=0)
    """The application's own failures (against failurePolicy.maxRestarts)."""
    infrastructure: int = Field(default=0, ge=0)
    """The platform's faults (against failurePolicy.maxInfrastructureRestarts)."""


class Preempting(ApiModel):
    """A preemption under way (spec.preemptionPolicy of the job that needs the room)."""

    by: str
    """The preempting job (namespace/name)."""
    at: datetime
    """When this job was chosen as a victim (its workers were asked to save)."""
    deadline: datetime
    """When its workers are stopped, saved or not (at + preemptionGraceSeconds)."""
    message: str | None = None
    """Why this job: what its removal frees for the preempting gang."""


class NodeNotice(ApiModel):
    """A node of the gang is about to go (health.notices): the workers are asked to save a
    checkpoint now, and the ranks there move to a spare once it is saved or by the
    deadline, whichever comes first."""

    node: str
    """The node that goes."""
    kind: str
    """SpotInterruption, RebalanceRecommendation, ScheduledMaintenance,
    AutoScalingTermination, KarpenterDisruption or Drain."""
    since: datetime
    """When the operator first saw the notice (the node's taint or cordon)."""
    deadline: datetime
    """When the ranks move, saved or not: `since` plus the group's
    noticeDeadlineSeconds for the kind."""


class CheckpointAdvice(ApiModel):
    """The checkpoint interval that maximises this job's goodput (health.advice): Daly's
    optimum for its measured save cost and the failure rate its group's nodes have shown
    (their incident scores), and the job's own interval beside it."""

    interval_seconds: float = Field(ge=0)
    """Seconds of training between saves, advised (sdk.checkpoint_interval() returns it)."""
    save_seconds: float = Field(ge=0)
    """What a save stalls training: the median of the job's recent saves."""
    mtbf_seconds: float = Field(ge=0)
    """Mean time between failures of the job's nodes together."""
    node_failures_per_day: float = Field(ge=0)
    """Failures per node and day in the job's group."""
    measured_seconds: float | None = Field(default=None, ge=0)
    """The job's own interval: the median gap between its recent commits."""


class TrainingJobStatus(ApiModel):
    """Observed state of the job, written by the operator."""

    observed_generation: int | None = None
    """The .metadata.generation this status was computed from."""
    phase: Phase | None = None
    """Pending, Placing, Running, Recovering, Succeeded, Failed or Suspended."""
    message: str | None = None
    """Human-readable summary of the phase."""
    conditions: list[Condition] = conditions_field()
    """Admitted (under Kueue: Queued, Admitted, Evicted, WorkloadMissing,
    WorkloadRefused, KueueUnavailable), Placed (reason Preempting while lower-priority
    jobs make room; WaitingForTurn before its first search, while more of its namespace's
    jobs wait than a pass searches: --searches-per-namespace), WorkersCreated,
    Running (reason Resizing during an elastic grow), HangDetection and Straggler (which
    signal is in force, and what it found), Preempted (Checkpointing, Requeued, Resumed,
    Cancelled), EvidenceHeld (nodes its reports blamed that the group's blame budget holds
    back: BlameBudgetInUse), Succeeded, Failed, Suspended."""
    workers: WorkerCounts = nested(WorkerCounts)
    """Workers by state."""
    accelerators: int = Field(default=0, ge=0)
    """Accelerators allocated to the job."""
    placement: Placement | None = None
    """Domains and nodes in rank order."""
    restarts: int = Field(default=0, ge=0)
    """Gang restarts so far (all causes)."""
    restarts_by_budget: RestartsByBudget | None = None
    """The restarts each budget has paid for (failurePolicy.maxRestarts,
    maxInfrastructureRestarts)."""
    checkpoint: CheckpointStatus = nested(CheckpointStatus)
    """Latest and latest verified checkpoints (written from workers' reports)."""
    progress: Progress | None = None
    """The latest step a worker reported."""
    sdc: SdcStatus | None = None
    """Cross-replica fingerprint votes and numeric guards of the current attempt."""
    preemption: Preempting | None = None
    """While a higher-priority gang preempts this job: by whom, since when, and until when
    its workers may save a checkpoint before they are stopped."""
    checkpoint_advice: CheckpointAdvice | None = None
    """The checkpoint interval advised for this job, once a save has been timed and its
    group has seen a failure; the CheckpointInterval condition says whether the job's own
    interval is near it."""
    notice: NodeNotice | None = None
    """While a node of the gang is about to go: which, why, and until when the workers may
    save before its ranks move."""
    incidents: list[Incident] = Field(default_factory=list, max_length=MAX_INCIDENTS)
    """The most recent interruptions (newest last, at most 32) with their costs."""
    goodput: Goodput = nested(Goodput)
    """Productive and lost seconds."""
    start_time: datetime | None = None
    """When all workers first ran."""
    completion_time: datetime | None = None
    """When the job Succeeded or Failed."""
    cluster: str | None = None
    """The cluster whose operator wrote this status (its --cluster-name): under MultiKueue
    the status is copied to the manager cluster, and the nodes it names are this
    cluster's."""
    workload: str | None = None
    """The Kueue Workload that holds this job's quota (a job with a
    kueue.x-k8s.io/queue-name label, or one MultiKueue dispatched here)."""
