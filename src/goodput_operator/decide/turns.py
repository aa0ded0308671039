"""Turns at placement: how many placement searches one namespace's waiting objects run in
a pass.

A placement search (with the preemption search behind it) is the costliest part of
deciding an object, and an object that does not fit pays it again in every pass for as
long as it waits: one namespace's 2,000 waiting 8-worker jobs cost every pass of the whole
operator 0.57 s of searches (0.29 s with turns; `python -m bench.tenancy`), and every
team's node failure waited behind them. Every tenant pays
for its own work (TENANCY.md, rule 4), so in each pass the objects of one kind in one
namespace that wait for placement run at most `Snapshot.searches_per_namespace`
searches. Turns go to the objects whose last turn is oldest (never had one: first), ties
in queue order (priority, then arrival), so each of N waiting objects is searched again
within ceil(N / turns) passes: a namespace's own backlog cannot starve its tail, and its
size costs the other namespaces nothing. An object without a turn keeps what its last
search said (conditions are not rewritten), and is searched again when its turn comes.

What the bound leaves alone: a namespace with no more waiting objects than turns (every
one searched, as before); placed objects (a replacement after a node failure is not a
search for a turn). A job already preempting takes turns at its search for victims (up to
topology.preemption.TRIALS placements each) like any other; without a turn it is still
tried in the free room (one placement) and marks the victims of its last search again
while they still make room (one more), so they are not let go and marked again a turn
later; only when they no longer make room does it search out of turn.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from typing import Any

from goodput_operator.api.conditions import Conditions
from goodput_operator.decide.snapshot import Snapshot
from goodput_operator.decide.types import ConditionUpdate

Obj = dict[str, Any]
TurnKey = tuple[str, str, str]  # kind, namespace, name
REASON = "WaitingForTurn"


def turn(snapshot: Snapshot, kind: str, obj: Obj, objects: Sequence[Obj],
         waiting: Callable[[Obj], bool]) -> bool | None:
    """OBJ's turn this pass: None when its namespace is within its turns (or OBJ does not
    wait), True when it has one of them, False when it waits for a later pass.
    OBJECTS: the kind's objects in queue order; WAITING: whether one waits for placement.
    Worked out once a pass for the whole kind (the memo)."""
    meta = obj["metadata"]
    granted = snapshot.memo.recall(("turns", kind),
                                   lambda: _grant(snapshot, kind, objects, waiting))
    among = granted.get(meta["namespace"])
    if among is None or not waiting(obj):
        return None
    return (meta["namespace"], meta["name"]) in among


def _grant(snapshot: Snapshot, kind: str, objects: Sequence[Obj],
           waiting: Callable[[Obj], bool]) -> dict[str, set[tuple[str, str]]]:
    """Namespace -> the objects that have a turn, for each namespace with more waiting
    objects than turns."""
    queued: dict[str, list[tuple[float, int, tuple[str, str]]]] = {}
    for order, obj in enumerate(objects):
        if waiting(obj):
            meta = obj["metadata"]
            key = (meta["namespace"], meta["name"])
            last = snapshot.searched.get((kind, *key), -math.inf)
            queued.setdefault(key[0], []).append((last, order, key))
    turns = max(1, snapshot.searches_per_namespace)
    return {namespace: {key for _, _, key in heapq.nsmallest(turns, entries)}
            for namespace, entries in queued.items() if len(entries) > turns}


def granted(snapshot: Snapshot, kind: str) -> list[TurnKey]:
    """The objects of KIND that had a turn in the pass SNAPSHOT was decided in, for the
    controller to record as of the pass's clock: whether or not their decision searched
    (a job held by Kueue, say), a turn had is a turn taken, or objects that never search
    would keep the turns for ever."""
    return [(kind, *key) for keys in snapshot.memo.get(("turns", kind), {}).values()
            for key in sorted(keys)]


def short_of_replicas(ie: Obj) -> bool:
    """An InferenceEndpoint whose status says it wants more of its replicas placed (or
    sent to regions): fewer than desired, or a spec it has not acted on yet."""
    status = ie.get("status") or {}
    return status.get("observedGeneration") != ie["metadata"].get("generation") or \
        _count(status.get("replicas")) < _count(status.get("desiredReplicas"))


def _count(value: Any) -> int:
    """A status count, 0 when it is not one: the turns of every namespace are worked out
    together, so one object's odd status must not fail them all."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def kept(conditions: Conditions, kind: str, status: bool, namespace: str,
         turns: int) -> ConditionUpdate:
    """The condition of type KIND an object without a turn keeps: what its last search
    said, as it said it (no status write for a pass that learnt nothing), or, before its
    first search, that it waits for a turn."""
    previous = next((c for c in conditions if c.get("type") == kind), None)
    if previous is not None and previous.get("status") == ("True" if status else "False"):
        return ConditionUpdate(kind, status, previous.get("reason", ""),
                               previous.get("message", ""))
    return ConditionUpdate(kind, status, REASON, (
        f"waiting for a turn at placement: namespace {namespace} has more objects waiting "
        f"than the {max(1, turns)} searched in each pass (those searched longest ago first)"))
