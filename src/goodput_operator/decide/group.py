"""An UltraServerGroup's pass, decided: which nodes to quarantine and release (by
health/quarantine's rules), the labels its nodes should carry, the probes to start, and
the per-domain status.

The group pass runs before the jobs': a node quarantined in it is out of the fleet when
the jobs on it are recovered, in the same pass. The status is decided from the fleet as
the pass found it; the quarantines and releases it makes show in the next pass's status,
which their node patches wake at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from goodput_operator import names, times
from goodput_operator.api.base import MESSAGE_LENGTH
from goodput_operator.api.conditions import Conditions, is_true, set_condition
from goodput_operator.api.statuses import ConditionDict, DomainStatusDict
from goodput_operator.api.ultraservergroup import (
    MAX_HELD_EVIDENCE,
    MAX_IGNORED_PODS,
    MAX_LISTED_DOMAINS,
    UltraServerGroupSpec,
)
from goodput_operator.api.ultraservergroup import Quarantine as QuarantinePolicy
from goodput_operator.decide.attempt import books_of
from goodput_operator.decide.snapshot import Snapshot
from goodput_operator.decide.standby import standby_map
from goodput_operator.decide.types import (
    ConditionUpdate,
    Event,
    GroupStatus,
    ProbeStart,
    apply_conditions,
)
from goodput_operator.health import accounting, cron
from goodput_operator.health import quarantine as q
from goodput_operator.topology.model import Domain, Fleet, trainingjob_owner

Obj = dict[str, Any]
STATUS_INTERVAL = 2.0  # seconds between writes of usage-only changes


DomainHealth = Literal["Healthy", "Degraded", "Failed"]  # DomainStatusDict's
GroupHealth = Literal["Healthy", "Degraded", "Failed", "Empty"]  # the group status's


@dataclass(frozen=True)
class Quarantine:
    node: str
    finding: q.Finding
    patch: Obj  # the merge patch (carries the node's resourceVersion)
    message: str


@dataclass(frozen=True)
class Release:
    node: str
    record: q.Record
    patch: Obj
    message: str


@dataclass
class GroupDecision:
    name: str
    body: Obj  # the group as read
    desired: GroupStatus  # the status
    write: bool  # whether the status is written this pass (usage-only changes wait)
    quarantine: list[Quarantine] = field(default_factory=list)
    release: list[Release] = field(default_factory=list)
    labels: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # node, labels
    probes: list[ProbeStart] = field(default_factory=list)
    forget_blame: list[str] = field(default_factory=list)  # out, orphaned or expired blame
    events: list[Event] = field(default_factory=list)  # on the group, after its write
    storm: str | None = None
    sweep_mark: float | None = None  # the group's last scheduled sweep, from now on
    wake_at: float | None = None
    ledger: accounting.Ledger | None = None  # the accounting as counted in this pass
    seen: dict[str, accounting.Seen] = field(default_factory=dict)  # job uid -> as seen


def decide_group(snapshot: Snapshot, name: str) -> GroupDecision:
    spec, body, fleet = snapshot.groups[name], snapshot.group_objects[name], \
        snapshot.fleets[name]
    now, policy = snapshot.clock, spec.quarantine
    members = snapshot.members.get(name, {})
    jobs = {f"{j['metadata']['namespace']}/{j['metadata']['name']}"
            for j in snapshot.jobs} if snapshot.blamed else set()
    forget = [n for n, f in snapshot.blamed.items() if n in members and (
        _settled(q.record_of(members[n]), f) or (f.owner and f.owner not in jobs)
        or (not f.owner and f.since < now - q.BLAME_SECONDS))]  # a job's: while it lives
    reported = {n: f for n, f in snapshot.blamed.items() if n in members and n not in forget}
    verdict = q.decide(members, policy, now, snapshot.seen_unhealthy, snapshot.healthy_since,
                       reported, snapshot.clean_probes, snapshot.renewing,
                       snapshot.device_taints, snapshot.probed_at)
    wakes = [verdict.wake_at]
    quarantine = [Quarantine(node, found, q.quarantine_patch(
        members[node], found, now, half_life_days=spec.quarantine.lemon_half_life_days),
                             quarantine_message(node, found)) for node, found in verdict.quarantine]
    release = [Release(node, record,
                       q.release_patch(members[node], now if record.is_hold else None),
                       release_message(snapshot, policy, node, record))
               for node, record in verdict.release]
    probes = _suspects(snapshot, name, spec, members) if spec.probes.on_suspicion else []
    sweep, sweep_mark, schedule_error = _sweep(snapshot, name, spec, fleet)
    if spec.probes.schedule and not schedule_error:
        wakes.append(now - now % 60 + 60.5)  # look again at the next minute

    status = dict(body.get("status") or {})
    generation = body["metadata"].get("generation")
    overlap = overlap_message(snapshot.overlaps.get(name, {}))
    standby = {d: held.endpoint for d, held in standby_map(snapshot, name).items()}
    desired = group_status(spec, fleet, status.get("conditions") or [], Notes(
        verdict.storm, generation, times.seconds(now), schedule_error, overlap,
        inconclusive_message(snapshot, (n for n, body in members.items()
                                        if q.record_of(body))),
        standby))
    desired |= ignored_pods(snapshot.ignored_pods, fleet)
    desired |= held_evidence(verdict.held_blame, verdict.not_before)
    ledger, seen = accounted(snapshot, name, fleet, standby, status.get("accounting"))
    desired["accounting"] = accounting.to_status(ledger)
    events = []
    if verdict.storm and not is_true(status.get("conditions") or [], "StormGuard"):
        events.append(Event("Warning", "StormGuard", verdict.storm))
    if overlap and not is_true(status.get("conditions") or [], "Overlapping"):
        events.append(Event("Warning", "Overlapping", overlap))
    write, wake = _due(status, desired, now - snapshot.group_written.get(name, 0.0))
    wakes.append(None if wake is None else now + wake)
    return GroupDecision(
        name, body, desired, write, quarantine, release, _labels(snapshot, name, fleet),
        probes + sweep, forget, events, verdict.storm, sweep_mark,
        min((w for w in wakes if w is not None), default=None), ledger, seen)


def accounted(snapshot: Snapshot, name: str, fleet: Fleet, standby: Mapping[str, str],
              written: Any) -> tuple[accounting.Ledger, dict[str, accounting.Seen]]:
    """The group's accounting counted to this pass (health.accounting), from the ledger
    this replica keeps, else the one the status holds (WRITTEN); and how this pass saw
    the group's jobs (the next pass moves what their books learn in between). STANDBY:
    the endpoint holding each standby domain."""
    now = snapshot.clock
    buckets: dict[str, accounting.Bucket] = {}
    jobs: dict[str, tuple[str, accounting.Seen]] = {}
    for job in snapshot.jobs:
        view = snapshot.job(job)
        if view.spec is None or view.spec.ultra_server_group != name:
            continue
        meta = job["metadata"]
        owner = trainingjob_owner(meta["namespace"], meta["name"])
        books = books_of(view.status)
        buckets[owner] = accounting.job_bucket(books)
        chips = sum(fleet.pods[key][1] for key in fleet.by_owner.get(owner, ()))
        jobs[meta.get("uid") or owner] = (meta["namespace"], accounting.Seen(
            chips, accounting.later_seconds(books, now)))
    ledger = accounting.advanced(
        snapshot.accounts.get(name) or accounting.from_status(written),
        accounting.moment(fleet, buckets, standby), now,
        accounting.moves(jobs, snapshot.accounted))
    return ledger, {uid: seen for uid, (_, seen) in jobs.items()}


def _settled(record: q.Record | None, blame: q.Finding) -> bool:
    """Whether BLAME on a node with RECORD has nothing left to do: the node is out already,
    unless it is a tenant's hold and BLAME is the probe's answer to it."""
    return record is not None and not (record.is_hold and not blame.owner)


def quarantine_message(node: str, found: q.Finding) -> str:
    if found.owner:
        return (f"held {node} out of new placements until a probe answers: {found.reason} "
                f"reported by {found.owner}: {found.evidence}")
    return f"quarantined {node}: {found.reason}: {found.evidence}"


def release_message(snapshot: Snapshot, policy: QuarantinePolicy, node: str,
                    record: q.Record) -> str:
    if record.is_hold:
        answered = record.answered(snapshot.probed_at.get(node))
        return (f"released {node} from the hold {record.owner}'s reports asked for "
                f"({record.reason}): " + ("a probe run was clean" if answered else
                                           f"no probe answered in {q.HOLD_SECONDS:.0f}s"))
    return f"released {node} from quarantine ({record.reason}): " + (
        f"{snapshot.clean_probes.get(node, 0)} clean probe runs in a row"
        if record.reason in q.PROBED else
        f"healthy for {policy.release_after_healthy_seconds}s")


def may_probe(snapshot: Snapshot, spec: UltraServerGroupSpec, node: str) -> bool:
    """Whether a probe run on NODE could prove anything: not when the image the group's
    probes run already came back inconclusive there (health.probing)."""
    held = snapshot.inconclusive.get(node)
    return held is None or held.image != (spec.probes.image or snapshot.probe_image)


def inconclusive_message(snapshot: Snapshot, nodes: Iterable[str]) -> str:
    """'probe of n1 inconclusive: ...' for the first of NODES whose last run proved
    nothing, and how many more, or ''."""
    held = sorted(n for n in nodes if n in snapshot.inconclusive)
    if not held:
        return ""
    more = f" (and {len(held) - 1} more node(s))" if len(held) > 1 else ""
    return f"probe of {held[0]} inconclusive: {snapshot.inconclusive[held[0]].message}{more}"


def _suspects(snapshot: Snapshot, group: str, spec: UltraServerGroupSpec,
              members: Mapping[str, Obj]) -> list[ProbeStart]:
    """Keep one probe Job running on each node quarantined for corruption (or as a
    straggler's) until it has enough clean runs, and on each node a tenant's reports hold
    until one run answers; each result lets the next run start (Job names count the runs)."""
    starts = []
    for node_name, node in members.items():
        record = q.record_of(node)
        if record is None or record.reason not in q.PROBED:
            continue
        if record.is_hold:
            if record.answered(snapshot.probed_at.get(node_name)):
                continue  # answered: released in this pass
        elif snapshot.clean_probes.get(node_name, 0) >= \
                spec.quarantine.release_after_clean_probes:
            continue
        if not may_probe(snapshot, spec, node_name):
            continue  # this image cannot test the node: it waits for a human or a new image
        starts.append(ProbeStart(group, node_name, "suspicion",
                                 snapshot.probe_runs.get(node_name, 0)))
    return starts


def _sweep(snapshot: Snapshot, group: str, spec: UltraServerGroupSpec, fleet: Fleet
           ) -> tuple[list[ProbeStart], float | None, str | None]:
    """On the group's probe schedule, probe every idle healthy node: the probes, the sweep
    mark to record (first sight of the group, or a sweep now), and why the schedule is
    unusable, if it is."""
    schedule, now = spec.probes.schedule, snapshot.clock
    if not schedule:
        return [], None, None
    last = snapshot.last_sweep.get(group)
    mark = now if last is None else None
    try:
        cron.parse(schedule)  # said at once, not when the first minute comes
        is_due = cron.due(schedule, now if last is None else last, now)
    except cron.CronError as err:
        return [], mark, str(err)
    if not is_due:
        return [], mark, None
    idle = [n.name for n in fleet.nodes.values()
            if n.healthy and not n.pods and may_probe(snapshot, spec, n.name)]
    return [ProbeStart(group, node, "schedule", int(now)) for node in idle], now, None


def _labels(snapshot: Snapshot, group: str, fleet: Fleet) -> list[tuple[str, dict[str, str]]]:
    """goodput.dev/group, /domain and /slot on each member that lacks them, for kubectl and
    other tools."""
    wanted: list[tuple[str, dict[str, str]]] = []
    for domain in fleet.ordered_domains():
        for node in domain.nodes:
            want = {names.GROUP_LABEL: group, names.NODE_DOMAIN_LABEL: domain.id,
                    names.SLOT_LABEL: str(node.slot)}
            labels = snapshot.nodes[node.name]["metadata"].get("labels") or {}
            if any(labels.get(k) != v for k, v in want.items()):
                wanted.append((node.name, want))
    return wanted


def _due(status: Obj, desired: GroupStatus, since_written: float) -> tuple[bool, float | None]:
    """Write the status when it changed: at once when health, conditions or membership
    did, at most every STATUS_INTERVAL seconds when only usage counters moved (a gang
    launch changes them with every pod; the last change is written when the interval
    is over, in how many seconds is the second value). The accounting, which moves with
    every pass, alone makes a write once the written one is WRITE_SECONDS old."""
    if all(status.get(k) == v for k, v in desired.items() if k != "accounting"):
        age = _account_age(status, desired)
        if age is None or age >= accounting.WRITE_SECONDS:
            return age is not None, None
        return False, accounting.WRITE_SECONDS - age
    if _shape(status) != _shape(desired) or since_written >= STATUS_INTERVAL:
        return True, None
    return False, STATUS_INTERVAL - since_written


def _account_age(status: Obj, desired: GroupStatus) -> float | None:
    """How much older the written accounting is than DESIRED's; None: no accounting."""
    counted = times.parse((desired.get("accounting") or {}).get("asOf"))
    if counted is None:
        return None
    written = times.parse((status.get("accounting") or {}).get("asOf"))
    return accounting.WRITE_SECONDS if written is None else counted - written


def _shape(status: Mapping[str, Any]) -> tuple[object, ...]:
    """The status without its usage counters (free accelerators)."""
    totals = {k: v for k, v in (status.get("totals") or {}).items() if k != "freeAccelerators"}
    domains = [{k: v for k, v in d.items() if k != "freeAccelerators"}
               for d in status.get("domains") or []]
    return (status.get("health"), status.get("observedGeneration"), repr(totals),
            repr(domains), repr(status.get("conditions")))


def overlap_message(overlaps: Mapping[str, list[str]]) -> str:
    """What the Overlapping condition says: which older groups keep which of the nodes this
    group's selector matches (a node belongs to one group: the oldest selecting it)."""
    parts = []
    for group, nodes in sorted(overlaps.items()):
        listed = ", ".join(sorted(nodes)[:10]) + (f" and {len(nodes) - 10} more"
                                                 if len(nodes) > 10 else "")
        parts.append(f"{len(nodes)} node(s) also selected by the older group '{group}', "
                     f"which keeps them: {listed}")
    if not parts:
        return ""
    return ("; ".join(parts) + "; this group places nothing on them until the selectors no "
            "longer overlap")


def domain_health(domain: Domain, nodes_per_domain: int) -> DomainHealth:
    healthy = sum(1 for n in domain.nodes if n.healthy)
    if healthy == 0:
        return "Failed"
    if healthy == len(domain.nodes) == nodes_per_domain:
        return "Healthy"
    return "Degraded"


@dataclass(frozen=True)
class Notes:
    """What the group's pass says beside its fleet model: when (GENERATION, AT), the storm
    guard's reason, a probe schedule that does not parse, the groups its selector overlaps,
    why a quarantined node's probe proved nothing (INCONCLUSIVE), and which endpoint holds
    each standby domain."""

    storm: str | None
    generation: int | None
    at: str
    schedule_error: str | None = None
    overlap: str = ""
    inconclusive: str = ""
    standby: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Summary:
    """The group's domains as its status lists them, their totals, what is misshaped,
    and the group's health."""

    domains: list[DomainStatusDict]
    totals: Counter[str]
    misshaped: list[str]

    @property
    def health(self) -> GroupHealth:
        healths = {d.get("health") for d in self.domains}
        return "Empty" if not self.domains else "Healthy" if healths == {"Healthy"} else \
            "Failed" if healths == {"Failed"} else "Degraded"


def group_status(spec: UltraServerGroupSpec, fleet: Fleet, conditions: Conditions,
                 notes: Notes) -> GroupStatus:
    """The group's status from its fleet model: per domain, totals, health, conditions."""
    summary = summarized(spec, fleet, notes.standby)
    listed = listed_domains(summary.domains)
    totals = summary.totals
    return {"observedGeneration": notes.generation, "health": summary.health,
            "totals": {"domains": totals["domains"], "healthyDomains": totals["healthyDomains"],
                       "nodes": totals["nodes"], "readyNodes": totals["readyNodes"],
                       "accelerators": totals["accelerators"],
                       "freeAccelerators": totals["freeAccelerators"],
                       "quarantined": totals["quarantined"], "spares": totals["spares"],
                       "standbyDomains": totals["standbyDomains"]},
            "domains": listed, "domainsOmitted": len(summary.domains) - len(listed),
            "conditions": group_conditions(spec, conditions, summary, notes)}


def summarized(spec: UltraServerGroupSpec, fleet: Fleet, standby: Mapping[str, str]
               ) -> Summary:
    """Each domain's health, readiness, free accelerators, quarantined nodes, spares and
    standby endpoint; their totals; and what does not have the declared shape."""
    summary = Summary([], Counter(), [])
    for domain in fleet.ordered_domains():
        health = domain_health(domain, spec.nodes_per_domain)
        ready = [n for n in domain.nodes if n.healthy]
        quarantined = [n.name for n in domain.nodes if n.state == "quarantined"]
        spares = [n.name for n in domain.nodes if n.spare]
        free = sum(n.free for n in ready if not n.spare)
        listed: DomainStatusDict = {
            "id": domain.id, "health": health, "nodesReady": len(ready),
            "nodesTotal": len(domain.nodes), "freeAccelerators": free,
            "quarantinedNodes": quarantined, "spares": spares}
        if domain.id in standby:
            listed["standbyFor"] = standby[domain.id]
        summary.domains.append(listed)
        if len(domain.nodes) != spec.nodes_per_domain:
            summary.misshaped.append(f"{domain.id} has {len(domain.nodes)} of "
                                     f"{spec.nodes_per_domain} nodes")
        summary.misshaped.extend(f"{n.name} has {n.capacity} of {spec.accelerator.per_node} "
                                 f"{spec.accelerator.resource}" for n in domain.nodes
                                 if n.state == "misshaped")
        summary.totals.update(
            domains=1, healthyDomains=int(health == "Healthy"), nodes=len(domain.nodes),
            readyNodes=len(ready), accelerators=sum(n.capacity for n in ready),
            freeAccelerators=free, quarantined=len(quarantined), spares=len(spares),
            standbyDomains=int(domain.id in standby))
    return summary


def group_conditions(spec: UltraServerGroupSpec, conditions: Conditions, summary: Summary,
                     notes: Notes) -> list[ConditionDict]:
    """Ready, Degraded, StormGuard, MisShaped, Overlapping, ProbesScheduled and
    ProbesInconclusive."""
    generation, at, totals, domains = notes.generation, notes.at, summary.totals, \
        summary.domains
    usable = summary.health in ("Healthy", "Degraded")
    conditions = set_condition(
        conditions, "Ready", usable, "DomainsAvailable" if usable else
        ("NoNodes" if not domains else "NoHealthyNodes"),
        f"{totals['healthyDomains']}/{totals['domains']} domains healthy, "
        f"{totals['readyNodes']}/{totals['nodes']} nodes ready" if domains else
        f"no node matches spec.nodeSelector {spec.node_selector}", generation, at)
    degraded = [f"{d['id']} {d['health']}" for d in domains if d["health"] != "Healthy"]
    updates = [
        ConditionUpdate("Degraded", bool(degraded),
                        "DomainsDegraded" if degraded else "AllHealthy",
                        ", ".join(degraded[:20])),
        ConditionUpdate("StormGuard", notes.storm is not None,
                        "TooManyFailing" if notes.storm else "WithinBudget", notes.storm or ""),
        ConditionUpdate("MisShaped", bool(summary.misshaped),
                        "ShapeMismatch" if summary.misshaped else "AsDeclared",
                        "; ".join(summary.misshaped[:20])),
        ConditionUpdate("Overlapping", bool(notes.overlap),
                        "SelectorsOverlap" if notes.overlap else "Disjoint", notes.overlap),
        _probes_scheduled(spec, notes.schedule_error),
        ConditionUpdate("ProbesInconclusive", bool(notes.inconclusive),
                        "AcceleratorNotExercised" if notes.inconclusive
                        else "NoneInconclusive", notes.inconclusive)]
    return apply_conditions(conditions, updates, generation, at)


def _probes_scheduled(spec: UltraServerGroupSpec, error: str | None) -> ConditionUpdate:
    schedule = spec.probes.schedule
    return ConditionUpdate(
        "ProbesScheduled", bool(schedule) and not error,
        "InvalidSchedule" if error else "Scheduled" if schedule else "Disabled",
        error or (f"probing idle nodes on '{schedule}'" if schedule
                  else "spec.probes.schedule is empty"))


def ignored_pods(ignored: Mapping[str, tuple[str, str]], fleet: Fleet) -> GroupStatus:
    """status.ignoredPods: the foreign pods pinned to this group's nodes that book nothing
    there (topology.bookings), at most MAX_IGNORED_PODS, by name."""
    here = sorted((key, node, why) for key, (node, why) in ignored.items()
                  if node in fleet.nodes)
    return {"ignoredPods": [{"pod": key, "node": node, "reason": why}
                            for key, node, why in here[:MAX_IGNORED_PODS]],
            "ignoredPodsOmitted": max(0, len(here) - MAX_IGNORED_PODS)}


def held_evidence(held: list[tuple[str, q.Finding]],
                  not_before: Mapping[str, float] | None = None) -> GroupStatus:
    """status.heldEvidence: blame the budget holds back, or that comes too soon after a
    tenant's hold on the node ended (NOT_BEFORE: until when; health.quarantine.decide),
    the oldest first, at most MAX_HELD_EVIDENCE."""
    ordered = sorted(held, key=lambda h: (h[1].since, h[0]))
    until = not_before or {}
    return {"heldEvidence": [{"node": node, "reason": f.reason, "owner": f.owner,
                              "since": times.millis(f.since),
                              "evidence": f.evidence[:MESSAGE_LENGTH],
                              **({"notBefore": times.millis(until[node])}
                                 if node in until else {})}
                             for node, f in ordered[:MAX_HELD_EVIDENCE]],
            "heldEvidenceOmitted": max(0, len(ordered) - MAX_HELD_EVIDENCE)}


def listed_domains(domains: list[DomainStatusDict]) -> list[DomainStatusDict]:
    """What status.domains shows of DOMAINS (in fabric order): at most MAX_LISTED_DOMAINS,
    those a person looks for first (not Healthy, or a node in quarantine), then the rest;
    fabric order kept, so the list does not reorder as health changes."""
    if len(domains) <= MAX_LISTED_DOMAINS:
        return domains
    plain = sorted(domains, key=lambda d: d.get("health") == "Healthy"
                   and not d.get("quarantinedNodes"))
    chosen = {d.get("id") for d in plain[:MAX_LISTED_DOMAINS]}  # a stable sort: notable first
    return [d for d in domains if d.get("id") in chosen]
