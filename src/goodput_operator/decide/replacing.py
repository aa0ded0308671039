"""Where a restarting TrainingJob's next attempt runs: the same nodes when none was lost;
else its lost ranks on spares of the same domains, keeping the topology (failurePolicy's
nodeReplacement and elastic bounds, decide.gang.replacement_for), the whole gang moved,
shrunk, or none yet (it waits); its pod sets beside the ranks; and the suspect nodes the
restart keeps, probed before the gang starts on them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from goodput_operator import times
from goodput_operator.api.statuses import PlacementDict
from goodput_operator.api.trainingjob import IncidentAction, TrainingJobSpec
from goodput_operator.decide.gang import (
    companions_for,
    placement_record,
    recorded_companions,
    replacement_for,
    request_for,
    reserve,
    restart_of,
)
from goodput_operator.decide.snapshot import Snapshot
from goodput_operator.decide.types import Reservation
from goodput_operator.topology.model import Fleet, trainingjob_owner
from goodput_operator.topology.placement import CompanionSlot, Placement, RankSlot, Request
from goodput_operator.topology.podsets import companions_near
from goodput_operator.topology.record import nodes_of, ranks_of

Obj = dict[str, Any]


@dataclass(frozen=True)
class Replaced:
    """The next attempt's placement (None: it waits), the replacement's action (restart,
    spare, move, shrink, wait) and why, and the reservations that hold it."""

    placement: PlacementDict | None
    action: IncidentAction
    why: str
    reservations: tuple[Reservation, ...] = ()


def replacement(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj,
                failed: list[str], probe_first: list[str]) -> Replaced:
    """The placement the restart runs on, its lost ranks (on FAILED nodes) replaced, the
    suspects of PROBE_FIRST it keeps marked to be probed first."""
    replaced = _replaced(snapshot, fleet, spec, job, failed)
    if replaced.placement is None:
        return replaced
    kept = sorted(set(nodes_of(replaced.placement)) & set(probe_first))
    if not kept:
        return replaced
    return dataclasses.replace(
        replaced, placement={**replaced.placement, "probeFirst": kept},
        why=f"{replaced.why}; probing suspect node(s) {', '.join(kept)} first")


def _replaced(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj,
              failed: list[str]) -> Replaced:
    placement: PlacementDict | None = (job.get("status") or {}).get("placement")
    ranks = ranks_of(placement)
    if placement is None or not ranks:
        return Replaced(None, "wait", "no placement yet: placing the gang when it fits")
    if not failed:
        restarted: PlacementDict = {**placement, "placedAt": times.millis(snapshot.clock)}
        return Replaced(restarted, "restart",
                        "restarting on the same nodes")
    current = Placement(True, "", tuple(
        RankSlot(r["rank"], r["node"], r.get("domain") or "",
                 fleet.nodes[r["node"]].slot if r["node"] in fleet.nodes else 0)
        for r in sorted(ranks, key=lambda r: r["rank"])))
    request = request_for(snapshot, fleet, spec, job, len(ranks))
    meta = job["metadata"]
    found = replacement_for(fleet, spec, current, failed, request,
                            trainingjob_owner(meta["namespace"], meta["name"]))
    if found.action == "wait":
        return Replaced(None, "wait", found.reason)
    companions = _companions_after(snapshot, spec, job, failed, request, found.ranks)
    if isinstance(companions, str):
        return Replaced(None, "wait", f"{found.reason}, but {companions}")
    held = reserve(fleet, job, spec, restart_of(job) + 1, found.ranks, companions)
    return Replaced(placement_record(Placement(True, found.reason, found.ranks),
                                     snapshot.clock, companions), found.action, found.reason,
                    held)


def _companions_after(snapshot: Snapshot, spec: TrainingJobSpec, job: Obj, failed: list[str],
                      request: Request, ranks: Sequence[RankSlot]
                      ) -> Sequence[CompanionSlot] | str:
    """The pod sets' places beside the replaced RANKS: where they were while none of them
    was lost and the workers kept their domains; else placed again near the workers
    (never on a lost node), or why they cannot be."""
    placement = (job.get("status") or {}).get("placement") or {}
    kept = recorded_companions(placement)
    domains = tuple(dict.fromkeys(r.domain for r in ranks))
    if not spec.pod_sets or (not any(c.node in failed for c in kept) and
                             set(domains) == set(placement.get("domains") or ())):
        return kept
    fleet, lost = snapshot.fleets[spec.ultra_server_group], set(failed)
    companions = [dataclasses.replace(c, eligible=(c.eligible if c.eligible is not None
                                                   else frozenset(fleet.nodes)) - lost)
                  for c in companions_for(snapshot, fleet, spec, job)]
    return companions_near(fleet, Placement(True, "", tuple(ranks), domains), request,
                           companions)
