"""What the operator knows at the start of a pass, as the decisions read it.

A snapshot refers to the operator's caches rather than copying them (a 10k-pod fleet
would cost a copy per pass): the decisions read it and never write it. The fleets are the
one exception they touch, and only inside `Fleet.trial()`, which leaves them as found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from goodput_operator.api.statuses import ProgressDict
from goodput_operator.api.ultraservergroup import UltraServerGroupSpec
from goodput_operator.api.views import (
    EndpointView,
    JobView,
    endpoint_views,
    job_views,
    key_of,
)
from goodput_operator.autoscaling.algorithm import Decision as ScalingDecision
from goodput_operator.autoscaling.routing import ProxyView
from goodput_operator.decide.priority import Classes, Priority, of_job
from goodput_operator.decide.types import Memo, OwnerKey, Refusal
from goodput_operator.health.accounting import Ledger, Seen
from goodput_operator.health.badput import REFRESH_SECONDS
from goodput_operator.health.hang import StepClock
from goodput_operator.health.probing import Inconclusive
from goodput_operator.health.quarantine import Finding, Renewal
from goodput_operator.health.signals import DeviceTaint
from goodput_operator.health.straggler import Pace, Straggler
from goodput_operator.topology.model import Fleet

Obj = dict[str, Any]
Key = tuple[str, str]  # namespace, name
ScaleKey = tuple[str, str, str]  # namespace, name, role ("" for a single-role endpoint)


@dataclass(frozen=True)
class Scaled:
    """The autoscaler's latest decision for one endpoint (or one of its roles), for the
    loop to write."""

    decision: ScalingDecision
    current: int
    at: float
    written: bool = False  # recorded in the endpoint's status (decide.endpoint)


@dataclass(frozen=True)
class Snapshot:
    clock: float  # epoch seconds: the pass's "now", for every decision in it
    nodes: Mapping[str, Obj] = field(default_factory=dict)
    groups: Mapping[str, UltraServerGroupSpec] = field(default_factory=dict)
    group_objects: Mapping[str, Obj] = field(default_factory=dict)
    fleets: Mapping[str, Fleet] = field(default_factory=dict)
    members: Mapping[str, Mapping[str, Obj]] = field(default_factory=dict)  # group -> nodes
    # group -> {the older group that keeps them: nodes both select}
    overlaps: Mapping[str, Mapping[str, list[str]]] = field(default_factory=dict)
    jobs: Sequence[Obj] = ()  # in the order they are decided: priority, then arrival
    job_pods: Mapping[Key, Mapping[str, Obj]] = field(default_factory=dict)
    endpoints: Sequence[Obj] = ()
    endpoint_pods: Mapping[Key, Mapping[str, Obj]] = field(default_factory=dict)
    # node health as the operator saw it change, and what workers and probes reported
    seen_unhealthy: Mapping[str, float] = field(default_factory=dict)
    noticed: Mapping[str, float] = field(default_factory=dict)  # node -> notice first seen
    healthy_since: Mapping[str, float] = field(default_factory=dict)
    blamed: Mapping[str, Finding] = field(default_factory=dict)
    clean_probes: Mapping[str, int] = field(default_factory=dict)  # clean runs in a row
    probe_runs: Mapping[str, int] = field(default_factory=dict)  # results received
    probed_at: Mapping[str, float] = field(default_factory=dict)  # last clean probe
    # node -> its last probe run proved nothing about its accelerators (health.probing)
    inconclusive: Mapping[str, Inconclusive] = field(default_factory=dict)
    probe_image: str = ""  # what probe Jobs run unless a group names its own
    last_sweep: Mapping[str, float] = field(default_factory=dict)  # group -> scheduled sweep
    group_written: Mapping[str, float] = field(default_factory=dict)  # group -> status write
    # each group's accounting as this replica counted it, and each job as it last saw it
    # (health.accounting), by group and by job uid
    accounts: Mapping[str, Ledger] = field(default_factory=dict)
    accounted: Mapping[str, Seen] = field(default_factory=dict)
    progress: Mapping[Key, ProgressDict] = field(default_factory=dict)  # latest step report per job
    steps: Mapping[Key, StepClock] = field(default_factory=dict)  # newest step, for hangs
    paces: Mapping[Key, Pace] = field(default_factory=dict)  # the ranks' paces (stragglers)
    stragglers: Mapping[Key, list[Straggler]] = field(default_factory=dict)
    renewing: Mapping[str, Renewal] = field(default_factory=dict)  # node -> Lease renewals
    # node -> its tainted DRA devices (from the ResourceSlices; health.signals)
    device_taints: Mapping[str, Sequence[DeviceTaint]] = field(default_factory=dict)
    refused: Mapping[Key, Refusal] = field(default_factory=dict)  # children not created
    scaled: Mapping[ScaleKey, Scaled] = field(default_factory=dict)  # not yet written
    report_url: str = ""  # where workers report (given to their pods)
    write_budget: int = 256  # pod writes this pass may make; the rest wait for the next
    standby_per_namespace: int = 8  # standby domains one namespace's endpoints may hold
    # placement searches a pass runs for one namespace's waiting objects of a kind, and
    # when each object last had one of those turns, by (kind, namespace, name)
    # (decide.turns; the controllers record the turns)
    searches_per_namespace: int = 32
    searched: Mapping[tuple[str, str, str], float] = field(default_factory=dict)
    refresh_seconds: float = REFRESH_SECONDS  # how old a running job's goodput may grow
    # what one pass works out once and several decisions read (which nodes a pod spec
    # fits, by group and spec, decide.fit): filled as the pass goes (State.fits)
    memo: Memo = field(default_factory=Memo)
    # the victims the jobs decided so far in this pass preempt (decide.preemption): a
    # victim has a lower priority, so it is decided later in the same pass and reads it
    preempting: dict[Key, Mark] = field(default_factory=dict)
    # Kueue (decide.quota): its Workloads by (namespace, name), each ResourceFlavor's node
    # labels, and whether this cluster serves Workloads at all
    workloads: Mapping[Key, Obj] = field(default_factory=dict)
    flavors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    kueue: bool = False
    # Workloads the API server refused to create, by their owner (kind, namespace, name):
    # the Workload's name and the refusal (said on the owner, tried again after a backoff)
    workload_refusals: Mapping[OwnerKey, tuple[str, Refusal]] = field(default_factory=dict)
    delegated: Sequence[Obj] = ()  # jobs MultiKueue runs elsewhere (spec.managedBy)
    delegated_endpoints: Sequence[Obj] = ()  # and endpoints (a multi-region one's replicas)
    cluster_name: str = ""  # this cluster's name, written into job statuses when set
    # the proxy multi-region endpoints' requests go through, as last read (None: the
    # operator routes none; autoscaling.routing)
    proxy: ProxyView | None = None
    # the admin's PriorityClasses and WorkloadPriorityClasses, and each job's priority
    # from them (decide.priority; State works them out once per pass)
    classes: Classes = field(default_factory=Classes)
    priorities: Mapping[Key, Priority] = field(default_factory=dict)
    # foreign pods that book no node (topology.bookings): pod key -> (node, why)
    ignored_pods: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # namespaces where an object must name a Kueue queue ("*": all; --require-queue)
    require_queue: frozenset[str] = frozenset()
    # every job's and endpoint's view (api.views), by (namespace, name): the cache's,
    # built once per spec version; those missing are built as the snapshot is made
    job_views: Mapping[Key, JobView] = field(default_factory=dict)
    endpoint_views: Mapping[Key, EndpointView] = field(default_factory=dict)

    def __post_init__(self) -> None:
        jobs = [*self.jobs, *self.delegated]
        if any(key_of(j) not in self.job_views for j in jobs):
            object.__setattr__(self, "job_views", {**self.job_views,
                                                   **job_views(jobs, self.job_views)})
        endpoints = [*self.endpoints, *self.delegated_endpoints]
        if any(key_of(e) not in self.endpoint_views for e in endpoints):
            object.__setattr__(self, "endpoint_views", {
                **self.endpoint_views, **endpoint_views(endpoints, self.endpoint_views)})

    def mark(self, key: Key, mark: Mark) -> None:
        """Leave MARK on the job KEY for the decisions after this one in the pass: the one
        word a decision leaves for a later one (a victim has a lower priority, so it is
        decided later and reads it; decide.preemption)."""
        self.preempting[key] = mark

    def job(self, obj: Obj) -> JobView:
        """OBJ's view (a job of this snapshot)."""
        return self.job_views[key_of(obj)]

    def endpoint(self, obj: Obj) -> EndpointView:
        return self.endpoint_views[key_of(obj)]

    def priority(self, job: Obj) -> Priority:
        """JOB's priority (decide.priority), worked out here for a job the pass has not."""
        meta = job["metadata"]
        found = self.priorities.get((meta["namespace"], meta["name"]))
        return found if found is not None else of_job(job, self.classes)


@dataclass(frozen=True)
class Mark:
    """A job chosen in this pass as a victim of a higher-priority gang's preemption, or of
    an endpoint reclaiming the standby domain it borrowed (priority None)."""

    by: str  # the preempting job, namespace/name (or "InferenceEndpoint namespace/name")
    priority: Priority | None
    message: str  # what its removal frees
    verb: str = "reclaimed"  # with priority None: reclaimed (standby), evicted (Kueue)
