"""What placing a job's gang on the pass's trial fleet takes, shared by the decisions
that place one (decide.job: a new gang, a replacement; decide.running: a grow): the
request as placement takes it, the reservations, and the record the status keeps."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from goodput_operator import times
from goodput_operator.api.statuses import PlacementDict
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.decide.attempt import Attempt
from goodput_operator.decide.fit import pod_fit
from goodput_operator.decide.snapshot import Snapshot
from goodput_operator.decide.types import Event, JobStatus, ProbeStart, Quota, Reservation
from goodput_operator.resources import trainingjob as build
from goodput_operator.resources.fabric import Fabric
from goodput_operator.topology.model import Fleet, trainingjob_owner
from goodput_operator.topology.placement import (
    Companion,
    CompanionSlot,
    Placement,
    RankSlot,
    Request,
    in_rank_order,
)
from goodput_operator.topology.record import companions_of, to_slices
from goodput_operator.topology.replacement import Elastic, Replacement, replace

Obj = dict[str, Any]


@dataclass
class JobDecision:
    """Everything one job's pass will do: the status to write, the children to change,
    the reservations and probes for the controller to record, and the events."""

    job: Obj
    status: Obj  # the status as read
    desired: JobStatus  # the keys to write (None removes one)
    events: list[Event] = field(default_factory=list)
    attempt: Attempt | None = None  # None: only the status changes (invalid spec, no group)
    placement: PlacementDict | None = None
    fresh: bool = False  # a placement made in this pass: write it before pinning
    spec: TrainingJobSpec | None = None
    observed: dict[str, Obj] = field(default_factory=dict)  # the job's pods, by name
    reservations: list[Reservation] = field(default_factory=list)
    probes: list[ProbeStart] = field(default_factory=list)
    wake_at: float | None = None  # a timer (backoff) runs out then
    placement_seconds: float | None = None  # time spent placing (a metric)
    pending_seconds: float | None = None  # created -> placed, when placed now (a metric)
    quota: Quota | None = None  # under Kueue: its Workload to create or patch (decide.quota)

    @property
    def key(self) -> tuple[str, str]:
        meta = self.job["metadata"]
        return meta["namespace"], meta["name"]


def restart_of(job: Obj) -> int:
    return int((job.get("status") or {}).get("restarts", 0))


def reserve(fleet: Fleet, job: Obj, spec: TrainingJobSpec, restart: int,
            ranks: Sequence[RankSlot], companions: Sequence[CompanionSlot] = ()
            ) -> tuple[Reservation, ...]:
    """Reserve the placed ranks and companion pods of attempt RESTART in the trial (the
    jobs decided later in this pass must see them); the reservations, for the controller
    to make for real."""
    group, meta = spec.ultra_server_group or "", job["metadata"]
    owner = trainingjob_owner(meta["namespace"], meta["name"])
    chips = {s.name: s.accelerators_per_pod for s in spec.pod_sets}
    held = [(build.pod_name(meta["name"], restart, r.rank), r.node,
             spec.accelerators_per_worker) for r in ranks]
    held += [(build.companion_name(meta["name"], restart, c.name, c.ordinal), c.node,
              chips.get(c.name, 0)) for c in companions if chips.get(c.name)]
    made = []
    for name, node, accelerators in held:
        key = f"{meta['namespace']}/{name}"
        fleet.bind(key, node, accelerators, owner)
        made.append(Reservation(group, key, node, accelerators, owner))
    return tuple(made)


def fabric_of(snapshot: Snapshot, spec: TrainingJobSpec) -> Fabric:
    """What the job's pods hold on their nodes: the group's accelerators and EFA."""
    return Fabric.of(snapshot.groups[spec.ultra_server_group])


def request_for(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj,
                workers: int) -> Request:
    """WORKERS of the job's gang as placement takes them: limited to the nodes its worker
    pod fits as kube-scheduler judges it (node selector, node affinity, taints,
    requests), worked out once per pass for each group and pod spec."""
    pod_spec = build.worker_pod(job, 0, 0, fabric_of(snapshot, spec), spec=spec)["spec"]
    eligible, why = pod_fit(snapshot.nodes, snapshot.memo, fleet, spec.ultra_server_group,
                            pod_spec)
    return gang_request(spec, workers, eligible, why)


def gang_request(spec: TrainingJobSpec, workers: int, eligible: frozenset[str] | None = None,
                 ineligible: str = "") -> Request:
    """WORKERS of SPEC's gang as placement takes them, limited to ELIGIBLE nodes (None:
    any; INELIGIBLE says why the others are not)."""
    return Request(workers, spec.accelerators_per_worker, spec.topology.unit,
                   spec.topology.policy, eligible, ineligible, spec.topology.balance,
                   spec.topology.slice.size if spec.topology.slice else 1)


def replacement_for(fleet: Fleet, spec: TrainingJobSpec, current: Placement,
                    failed: Sequence[str], request: Request, owner: str) -> Replacement:
    """Where the gang of CURRENT goes when its nodes in FAILED are lost: the job's own
    rules (failurePolicy.nodeReplacement, elastic bounds) applied to the topology's
    replacement, never back onto a failed node. The one function the controller's
    restart (decide.job) and the goodput simulator (simulate.engine) both call."""
    if spec.failure_policy.node_replacement == "wait":
        return Replacement("wait", "failurePolicy.nodeReplacement is wait: placing the gang "
                                   "again when it fits")
    allowed = request.eligible if request.eligible is not None else frozenset(fleet.nodes)
    gone = "; ".join(filter(None, [request.ineligible, f"{len(failed)} being replaced"]))
    request = dataclasses.replace(request, eligible=allowed - set(failed), ineligible=gone)
    elastic = Elastic(spec.elastic.min_workers, spec.elastic.step) if spec.elastic else None
    replaced = replace(fleet, current, failed, request, owner, elastic,
                       spares_only=spec.failure_policy.node_replacement == "spare")
    return dataclasses.replace(replaced, ranks=in_rank_order(replaced.ranks,
                                                             spec.topology.rank_order))


def companions_for(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj
                   ) -> list[Companion]:
    """The job's pod sets as placement takes them, each limited to the nodes its own pod
    fits (its template, node selector and tolerations: per pod set node selection)."""
    found = []
    for pod_set in spec.pod_sets:
        pod_spec = build.companion_pod(job, pod_set, 0, 0, fabric_of(snapshot, spec),
                                       spec=spec)["spec"]
        eligible, why = pod_fit(snapshot.nodes, snapshot.memo, fleet, spec.ultra_server_group,
                                pod_spec)
        found.append(Companion(pod_set.name, pod_set.replicas, pod_set.accelerators_per_pod,
                               pod_set.near, eligible, why))
    return found


SUMMARY_NAMES = 3  # domain names a placement's summary shows before "+N"


def domain_summary(domains: Sequence[str]) -> str:
    """DOMAINS for a printer column: the first SUMMARY_NAMES names, then how many more."""
    shown = ",".join(domains[:SUMMARY_NAMES])
    rest = len(domains) - SUMMARY_NAMES
    return f"{shown} +{rest}" if rest > 0 else shown


def placement_record(placed: Placement, clock: float,
                     companions: Sequence[CompanionSlot] | None = None) -> PlacementDict:
    """The placement as the status records it (and the next attempt reads it back).
    COMPANIONS: the pod sets' pods, when not the placement's own."""
    ranks = placed.ranks
    domains = placed.domains or tuple(dict.fromkeys(r.domain for r in ranks))
    record: PlacementDict = {"domains": list(domains), "reason": placed.reason,
                   "placedAt": times.millis(clock), "workers": len(ranks),
                   "slices": to_slices({"rank": r.rank, "node": r.node, "domain": r.domain}
                                       for r in ranks)}
    slots = placed.companions if companions is None else companions
    if slots:
        record["podSets"] = [{"set": c.name, "index": c.ordinal, "node": c.node,
                              "domain": c.domain} for c in slots]
    return record


def recorded_companions(placement: Obj | None) -> list[CompanionSlot]:
    """The companion pods a recorded placement holds, as placement gives them."""
    return [CompanionSlot(name, index, c["node"], c.get("domain") or "")
            for (name, index), c in companions_of(placement).items()]
