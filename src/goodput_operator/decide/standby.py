"""Warm standby (an endpoint's scaling.standbyDomains): whole domains kept free for its
next replica groups, so that a burst's replica is placed at once, and lent to training
jobs meanwhile as preemptible capacity.

Level-based, and ordered by the pass (jobs are decided before endpoints):
- each endpoint chooses its standby domains at the end of its pass (those it held that
  are still whole and healthy, topped up with pristine ones in fabric order) and writes
  them to status.standby; the next pass's jobs read them there (`standby_map`);
- a job is placed off the standby domains when it fits elsewhere; else it may borrow one
  (its Placed message says so), never one being reclaimed;
- a replica group that fits nowhere else reclaims the standby domain whose borrowers'
  removal lets it fit (status.standby.reclaim); the next pass marks those jobs as
  preemption victims (`reclaim_marks`, before the jobs are decided), which checkpoint
  and stop as for a higher-priority gang, and the group is placed once they are gone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from goodput_operator.api.statuses import ReclaimDict, StandbyStatusDict
from goodput_operator.decide.priority import resolve
from goodput_operator.decide.snapshot import Mark, Snapshot
from goodput_operator.topology.model import Fleet
from goodput_operator.topology.placement import Placement, Request, is_pristine, place, unhealthy


@dataclass(frozen=True)
class Held:
    """A standby domain: the endpoint holding it, and whether it is being reclaimed."""

    endpoint: str  # namespace/name
    reclaiming: bool = False


def standby_map(snapshot: Snapshot, group: str) -> dict[str, Held]:
    """The GROUP's standby domains, as the endpoints wrote them last pass."""
    def work() -> dict[str, Held]:
        found: dict[str, Held] = {}
        for ie in snapshot.endpoints:
            if (ie.get("spec") or {}).get("ultraServerGroup") != group:
                continue
            standby = (ie.get("status") or {}).get("standby") or {}
            meta = ie["metadata"]
            name = f"{meta['namespace']}/{meta['name']}"
            reclaimed = (standby.get("reclaim") or {}).get("domain")
            for domain in standby.get("domains") or []:
                if isinstance(domain, str):
                    found.setdefault(domain, Held(name, domain == reclaimed))
        return found

    return snapshot.memo.recall(("standby", group), work)


def reclaim_marks(snapshot: Snapshot) -> None:
    """The jobs each endpoint reclaims a standby domain from become this pass's
    preemption victims (call before the jobs are decided)."""
    for ie in snapshot.endpoints:
        reclaim = ((ie.get("status") or {}).get("standby") or {}).get("reclaim") or {}
        meta = ie["metadata"]
        for job in reclaim.get("jobs") or []:
            namespace, _, name = str(job).partition("/")
            snapshot.preempting.setdefault((namespace, name), Mark(
                f"InferenceEndpoint {meta['namespace']}/{meta['name']}", None,
                f"its standby domain {reclaim.get('domain')} is needed for a replica group"))


def place_off_standby(fleet: Fleet, request: Request, standby: Mapping[str, Held],
                      may_borrow: bool) -> Placement:
    """A job's gang: off the standby domains when it fits there; else, when it MAY_BORROW
    (spec.borrowStandby), on any it may borrow (not one being reclaimed), the reason
    saying which it borrows; a job that may not is told when borrowing would place it."""
    if not standby:
        return place(fleet, request)
    free = frozenset(d for d in fleet.domains if d not in standby)
    placed = place(fleet, dataclasses.replace(request, within=free))
    if placed.ok or request.within is not None:
        return placed
    open_ = frozenset(d for d in fleet.domains if not (d in standby and standby[d].reclaiming))
    borrowing = place(fleet, dataclasses.replace(request, within=open_))
    if not borrowing.ok:
        return placed
    lent = [d for d in borrowing.domains if d in standby]
    holders = sorted({standby[d].endpoint for d in lent})
    noun = fleet.shape.domain_noun
    if not may_borrow:
        return dataclasses.replace(placed, reason=(
            f"{placed.reason}; it would fit on standby {noun}(s) {', '.join(lent)} of "
            f"InferenceEndpoint(s) {', '.join(holders)}, which only a job with "
            f"spec.borrowStandby borrows"))
    return dataclasses.replace(borrowing, reason=(
        f"{borrowing.reason}; borrows standby {noun}(s) "
        f"{', '.join(lent)} of InferenceEndpoint(s) {', '.join(holders)}: reclaimed, after "
        f"a checkpoint, when a replica group needs it"))


def choose_standby(fleet: Fleet, wanted: int, current: Iterable[str], mine: set[str],
                   others: Mapping[str, Held], me: str) -> list[str]:
    """WANTED standby domains: those held (CURRENT) that are still complete, healthy and
    not used by the endpoint's own groups (MINE), lent or not; topped up with pristine
    domains no other endpoint holds, in fabric order."""
    def whole(domain_id: str) -> bool:
        domain = fleet.domains.get(domain_id)
        return domain is not None and not unhealthy(domain) and \
            len(domain.nodes) >= fleet.shape.nodes_per_domain

    taken = {d for d, held in others.items() if held.endpoint != me}
    kept = [d for d in dict.fromkeys(current) if whole(d) and d not in mine
            and d not in taken][:wanted]
    for domain in fleet.ordered_domains():
        if len(kept) >= wanted:
            break
        if domain.id not in kept and domain.id not in taken and domain.id not in mine and \
                is_pristine(domain) and whole(domain.id) and \
                not any(n.spare for n in domain.nodes):
            kept.append(domain.id)
    return kept


def borrowers(fleet: Fleet, domains: Iterable[str]) -> dict[str, list[str]]:
    """Per standby domain, the TrainingJobs' fleet owners with pods there."""
    found: dict[str, list[str]] = {}
    for domain_id in domains:
        domain = fleet.domains.get(domain_id)
        owners = domain.owners() if domain is not None else set()
        found[domain_id] = sorted(o for o in owners if o.startswith("tj/"))
    return found


def reclaim_for(fleet: Fleet, request: Request, lent: Mapping[str, list[str]],
                current: str | None) -> tuple[str, list[str]] | None:
    """The standby domain (the one being reclaimed first, then the fewest borrowers)
    whose borrowers' removal lets REQUEST's group fit there, and those borrowers."""
    order = sorted((d for d, owners in lent.items() if owners),
                   key=lambda d: (d != current, len(lent[d]), d))
    for domain in order:
        with fleet.without(lent[domain]):
            placed = place(fleet, dataclasses.replace(request, within=frozenset({domain})))
        if placed.ok:
            return domain, lent[domain]
    return None


def job_key(owner: str) -> str:
    """`tj/ns/name` (a fleet owner) -> `ns/name`."""
    return owner.removeprefix("tj/")


@dataclass
class Standby:
    """An endpoint's standby, decided: what status.standby says, and its condition."""

    status: StandbyStatusDict
    held: bool  # every wanted domain is held
    message: str
    reclaiming: str = ""  # a new reclaim: said in an event once
    reason: str = "Held"  # the Standby condition's: Held, NamespaceLimit, InsufficientCapacity


def held_elsewhere(snapshot: Snapshot, namespace: str, me: str) -> int:
    """Standby domains NAMESPACE's other endpoints hold (their statuses, every group).
    Counted once a pass for every endpoint: one namespace's thousands of endpoints cost
    one walk, not one each."""
    def work() -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for ie in snapshot.endpoints:
            meta = ie["metadata"]
            domains = ((ie.get("status") or {}).get("standby") or {}).get("domains")
            counts.setdefault(meta["namespace"], {})[f"{meta['namespace']}/{meta['name']}"] = (
                len(domains) if isinstance(domains, list) else 0)
        return counts

    mine = snapshot.memo.recall("standby held", work).get(namespace, {})
    return sum(mine.values()) - mine.get(me, 0)


def reclaimable(snapshot: Snapshot, ie: dict[str, Any], lent: Mapping[str, list[str]]
                ) -> dict[str, list[str]]:
    """The lent domains IE may take back: those whose every borrower is not above IE's
    class (a borrower opted in with spec.borrowStandby, but never for a lower class)."""
    meta = ie["metadata"]
    name = (ie.get("spec") or {}).get("priorityClassName")
    mine = resolve(meta["namespace"], name if isinstance(name, str) else None, 0,
                   snapshot.classes)

    jobs: dict[str, dict[str, Any]] = snapshot.memo.recall("jobs by key", lambda: {
        f"{j['metadata']['namespace']}/{j['metadata']['name']}": j for j in snapshot.jobs})

    def may(owner: str) -> bool:
        job = jobs.get(job_key(owner))
        return job is None or not snapshot.priority(job).above(mine)
    return {d: owners for d, owners in lent.items() if all(map(may, owners))}


def decide_standby(snapshot: Snapshot, ie: dict[str, Any], wanted: int, request: Request,
                   mine: set[str], waiting: bool) -> Standby:
    """IE's standby domains after its pass (MINE: the domains its groups hold now), within
    its namespace's cap, and the one it reclaims when a group of REQUEST is WAITING."""
    meta = ie["metadata"]
    me = f"{meta['namespace']}/{meta['name']}"
    group = ie["spec"]["ultraServerGroup"]
    fleet = snapshot.fleets[group]
    before = (ie.get("status") or {}).get("standby") or {}
    room = max(0, snapshot.standby_per_namespace - held_elsewhere(snapshot,
                                                                 meta["namespace"], me))
    capped = min(wanted, room)
    domains = choose_standby(fleet, capped, before.get("domains") or [], mine,
                             standby_map(snapshot, group), me)
    lent = borrowers(fleet, domains)
    reclaim: ReclaimDict | None = None
    if waiting:
        found = reclaim_for(fleet, request, reclaimable(snapshot, ie, lent),
                            (before.get("reclaim") or {}).get("domain"))
        if found is not None:
            reclaim = {"domain": found[0], "jobs": [job_key(o) for o in found[1]]}
    noun = fleet.shape.domain_noun
    jobs = sorted({job_key(o) for owners in lent.values() for o in owners})
    message = (f"{len(domains)}/{wanted} standby {noun}s held"
               + (f": {', '.join(domains)}" if domains else "")
               + (f"; namespace {meta['namespace']} may hold "
                  f"{snapshot.standby_per_namespace} in all (the operator's "
                  f"--standby-domains-per-namespace)" if capped < wanted else "")
               + ("" if len(domains) >= capped else f"; no other whole free {noun}")
               + (f"; lent to {', '.join(jobs)}" if jobs else "")
               + (f"; reclaiming {reclaim['domain']} from {', '.join(reclaim['jobs'])} for a "
                  f"replica group" if reclaim else ""))
    fresh = reclaim is not None and reclaim != before.get("reclaim")
    reason = "Held" if len(domains) >= wanted else \
        "NamespaceLimit" if len(domains) >= capped else "InsufficientCapacity"
    return Standby({"domains": domains, "lent": jobs, "reclaim": reclaim},
                   len(domains) >= wanted, message, message if fresh else "", reason)
