"""Placing a TrainingJob's whole gang (its first placement, or after a requeue): the
fewest domains its topology allows on the nodes its pods fit, off other endpoints'
standby domains unless it may borrow them, and when it does not fit and may preempt,
the lower-priority jobs whose removal makes room (decide.preemption). In a namespace with
more waiting jobs than a pass searches for, only in its turn (decide.turns).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from goodput_operator import times
from goodput_operator.api.conditions import Conditions
from goodput_operator.api.statuses import PlacementDict
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.decide.attempt import TERMINAL, books_of
from goodput_operator.decide.gang import (
    companions_for,
    placement_record,
    request_for,
    reserve,
    restart_of,
)
from goodput_operator.decide.preemption import preempt_for
from goodput_operator.decide.snapshot import Snapshot
from goodput_operator.decide.standby import place_off_standby, standby_map
from goodput_operator.decide.turns import kept, turn
from goodput_operator.decide.types import ConditionUpdate, Event, Reservation
from goodput_operator.health import badput
from goodput_operator.topology.model import Fleet
from goodput_operator.topology.placement import in_rank_order

Obj = dict[str, Any]


@dataclass(frozen=True)
class Placed:
    """A placement search's outcome: the placement (None: it waits), its Placed
    condition, the reservations that hold it, and what the search cost (metrics)."""

    placement: PlacementDict | None
    condition: ConditionUpdate
    reservations: tuple[Reservation, ...] = ()
    events: tuple[Event, ...] = ()
    placement_seconds: float | None = None
    pending_seconds: float | None = None


def place_gang(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj,
               conditions: Conditions) -> Placed:
    """Place the whole gang, or say why it waits (an event when the reason changes)."""
    has_turn = turn(snapshot, "TrainingJob", job, snapshot.jobs, waits_for_placement)
    previous = next((c for c in conditions if c["type"] == "Placed"), None)
    again = previous.get("message", "") if has_turn is False and previous is not None and \
        previous.get("reason") == "Preempting" else None
    if has_turn is False and again is None:
        return Placed(None, kept(conditions, "Placed", False, job["metadata"]["namespace"],
                                 snapshot.searches_per_namespace))
    request = dataclasses.replace(request_for(snapshot, fleet, spec, job, spec.workers),
                                  companions=tuple(companions_for(snapshot, fleet, spec, job)))
    started = time.perf_counter()
    recovering = badput.current_incident(books_of(job.get("status") or {})) is not None
    preempting = None
    # a recovering gang may take spares
    with fleet.spares_released() if recovering else contextlib.nullcontext():
        placed = place_off_standby(fleet, request,
                                   standby_map(snapshot, spec.ultra_server_group),
                                   spec.borrow_standby)
        if not placed.ok and spec.preemption_policy == "LowerPriority":
            # without a turn, the victims of its last search while they still make room
            if again is not None:
                preempting = preempt_for(snapshot, fleet, spec, job, request, again)
            if preempting is None:
                preempting = preempt_for(snapshot, fleet, spec, job, request)
    searched = time.perf_counter() - started
    if not placed.ok:
        reason, why = ("Preempting", preempting) if preempting else \
            ("WaitingForCapacity", placed.reason)
        said = () if previous is not None and previous.get("message") == why else \
            (Event("Normal", reason, why),)
        return Placed(None, ConditionUpdate("Placed", False, reason, why), events=said,
                      placement_seconds=searched)
    placed = dataclasses.replace(placed, ranks=in_rank_order(placed.ranks,
                                                             spec.topology.rank_order))
    held = reserve(fleet, job, spec, restart_of(job), placed.ranks, placed.companions)
    created = times.parse(job["metadata"].get("creationTimestamp"))
    return Placed(placement_record(placed, snapshot.clock),
                  ConditionUpdate("Placed", True, "Placed", placed.reason), held,
                  (Event("Normal", "Placed", placed.reason),), searched,
                  max(0.0, snapshot.clock - created) if created is not None else None)


def waits_for_placement(job: Obj) -> bool:
    """A job that asks for a placement search in every pass until it fits (decide.turns):
    not placed, not ended or suspended. One preempting already waits too: its search for
    victims (up to preemption.TRIALS placements) takes turns like any other, and between
    them it marks the victims it found again (`preempt_for`'s AGAIN)."""
    status = job.get("status") or {}
    return not status.get("placement") and status.get("phase") not in (*TERMINAL,
                                                                       "Suspended")
