"""Every accelerator-second of a group accounted: where each accelerator was, moment by
moment, integrated into status.accounting (api/accounting.py).

Pure. A group's pass takes a `moment`: each accelerator of its nodes in one bucket (a
state, or a TrainingJob's badput cause), with the namespace whose object holds it. The
ledger adds the *previous* moment times the seconds since it (the buckets held until
this pass changed them), so the buckets always add up to the whole, whatever the
passes' spacing. A computing job with a rank on a node that is not Ready (or quarantined)
is in `detection` on its other nodes: the gang waits for the lost rank until the
operator acts. Two of a job's causes are known only afterwards: the work redone after
resuming from a checkpoint, and checkpoint stalls; when a job's books (health.badput)
grow one of them, that many seconds times its accelerators move from productive to that
cause (never more than was counted productive), so the whole stays the whole. A gap of
over GAP_SECONDS between passes, or the time before a new leader's first pass, is
`unobserved`: no one saw it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, cast, get_args

from goodput_operator import times
from goodput_operator.api.accounting import MAX_ACCOUNTED_NAMESPACES
from goodput_operator.api.statuses import AccountingDict, BadputSecondsDict, NamespaceAccountDict
from goodput_operator.health.badput import Books, attributed, current_incident
from goodput_operator.topology.model import Fleet

State = Literal["productive", "serving", "standby", "idle", "spare", "quarantined",
                "unavailable", "other", "unobserved"]  # AccountingDict's top-level keys
Cause = Literal["launch", "detection", "replacement", "restart", "lostWork",
                "checkpoint"]  # BadputSecondsDict's keys
Bucket = State | Cause
STATES: tuple[State, ...] = get_args(State)
CAUSES: tuple[Cause, ...] = get_args(Cause)
OWNED: tuple[Bucket, ...] = ("productive", "serving", "standby", *CAUSES)  # by a namespace
LATER: tuple[Cause, ...] = ("lostWork", "checkpoint")  # known afterwards
GAP_SECONDS = 600.0  # passes this far apart: the time between them was not observed
WRITE_SECONDS = 60.0  # the figures in the status are at most this old

Held = Counter[tuple[str, Bucket]]  # (namespace, or "" for the group's own, bucket) -> devices


@dataclass(frozen=True)
class Seen:
    """A TrainingJob as its accounting last saw it: its accelerators in the group and its
    books' after-the-fact causes (LATER's seconds)."""

    chips: int
    later: tuple[float, ...]


@dataclass(frozen=True)
class Ledger:
    """The running account: the seconds in each bucket, the group's and each namespace's,
    and the moment held since AS_OF (empty when no pass of this replica saw it)."""

    since: float
    as_of: float
    whole: float = 0.0
    group: Mapping[Bucket, float] = field(default_factory=dict)
    namespaces: Mapping[str, Mapping[Bucket, float]] = field(default_factory=dict)
    moment: Held = field(default_factory=Counter)


def job_bucket(status: Books) -> Bucket:
    """Where a job's accelerators are now: recovering from an incident (replacement until
    its new placement, then restart), computing (productive), else launching."""
    incident = current_incident(status)
    if incident is not None:
        return "restart" if incident.get("replacedAt") else "replacement"
    return "productive" if (status.get("goodput") or {}).get("since") else "launch"


def later_seconds(status: Books, now: float) -> tuple[float, ...]:
    """The job's after-the-fact causes so far (LATER's order), open incident included."""
    spent = attributed(status, now)
    return tuple(spent.get(cause, 0.0) for cause in LATER)


def moment(fleet: Fleet, jobs: Mapping[str, Bucket], standby: Mapping[str, str]) -> Held:
    """Every accelerator of FLEET's nodes in one bucket now. JOBS: a TrainingJob's bucket
    by its fleet owner (topology.model.trainingjob_owner); STANDBY: the endpoint
    (namespace/name) holding each standby domain free."""
    held: dict[tuple[str, Bucket], int] = {}
    stalled = {owner for node in fleet.nodes.values() if not node.healthy
               for _, _, owner in node.pods.values()}  # a rank on a lost node
    owners: dict[str, tuple[str, Bucket]] = {}  # owner -> its (namespace, bucket), once

    def add(key: tuple[str, Bucket], devices: int) -> None:
        held[key] = held.get(key, 0) + devices

    for node in fleet.nodes.values():
        if not node.healthy:
            add(("", "quarantined" if node.state == "quarantined" else "unavailable"),
                node.capacity)
            continue
        used = 0
        for _, devices, owner in node.pods.values():
            key = owners.get(owner)
            if key is None:
                kind, _, rest = owner.partition("/")
                bucket = _pod_bucket(kind, jobs.get(owner), owner in stalled)
                key = owners[owner] = ("" if bucket == "other" else rest.partition("/")[0],
                                       bucket)
            take = min(devices, node.capacity - used)
            used += take
            add(key, take)
        free = node.capacity - used
        if node.spare:
            add(("", "spare"), free)
        elif node.domain in standby:
            add((standby[node.domain].partition("/")[0], "standby"), free)
        else:
            add(("", "idle"), free)
    return +Counter(held)


def _pod_bucket(kind: str, job: Bucket | None, stalled: bool) -> Bucket:
    """A pod's bucket by its owner's KIND (tj, ie, ...): a TrainingJob's JOB bucket
    (detection instead of productive while a rank of it is on a lost node: STALLED), an
    endpoint's serving, anything else (or a job the pass does not know) other."""
    if kind == "tj" and job is not None:
        return "detection" if stalled and job == "productive" else job
    return "serving" if kind == "ie" else "other"


def advanced(ledger: Ledger | None, now: Held, at: float,
             moves: Iterable[tuple[str, Cause, float]] = ()) -> Ledger:
    """LEDGER counted to AT: its moment held since its as_of (all of it unobserved when
    this replica had no moment, or the gap is over GAP_SECONDS), then MOVES (namespace,
    cause, accelerator-seconds) from productive to their causes (negative: back, as when
    a job's books count a save stall as redone work instead); NOW is held from AT."""
    if ledger is None:
        return Ledger(at, at, moment=now)
    seconds = max(0.0, at - ledger.as_of)
    group: dict[Bucket, float] = dict(ledger.group)
    namespaces: dict[str, dict[Bucket, float]] = {
        ns: dict(b) for ns, b in ledger.namespaces.items()}
    held = ledger.moment if ledger.moment and seconds <= GAP_SECONDS else \
        Counter({("", "unobserved"): sum((ledger.moment or now).values())})
    whole = ledger.whole
    for (namespace, bucket), devices in held.items():
        _add(group, bucket, devices * seconds)
        whole += devices * seconds
        if namespace:
            _add(namespaces.setdefault(namespace, {}), bucket, devices * seconds)
    for namespace, cause, amount in moves:  # productive -> cause, or back when negative
        mine = namespaces.get(namespace, {})
        source: Bucket = "productive" if amount > 0 else cause
        amount = min(abs(amount), mine.get(source, 0.0), group.get(source, 0.0))
        if amount > 0:
            target: Bucket = cause if source == "productive" else "productive"
            for books in (mine, group):
                _add(books, source, -amount)
                _add(books, target, amount)
    return Ledger(ledger.since, at, whole, group, namespaces, now)


def _add(books: dict[Bucket, float], bucket: Bucket, seconds: float) -> None:
    books[bucket] = books.get(bucket, 0.0) + seconds


def moves(jobs: Mapping[str, tuple[str, Seen]], seen: Mapping[str, Seen]
          ) -> list[tuple[str, Cause, float]]:
    """What the JOBS (uid -> (namespace, as seen now)) learned since SEEN (uid -> as seen
    by the last pass): each after-the-fact cause's change times the job's accelerators
    as last seen (while it did the work now redone; else now). A job first seen moves
    nothing: what it learned before is from before this replica counted."""
    found = []
    for uid, (namespace, current) in jobs.items():
        before = seen.get(uid)
        if before is None:
            continue
        chips = before.chips or current.chips  # what it held while doing that work
        for cause, was, now in zip(LATER, before.later, current.later, strict=True):
            if now != was and chips:
                found.append((namespace, cause, (now - was) * chips))
    return found


def to_status(ledger: Ledger) -> AccountingDict:
    """LEDGER as status.accounting: the group's buckets, each namespace's (the largest
    first, at most MAX_ACCOUNTED_NAMESPACES), rounded to the millisecond."""
    account: AccountingDict = {"since": times.millis(ledger.since),
                               "asOf": times.millis(ledger.as_of),
                               "acceleratorSeconds": round(ledger.whole, 3),
                               "badput": _badput(ledger.group)}
    for state in STATES:
        cast(dict[str, float], account)[state] = round(ledger.group.get(state, 0.0), 3)
    listed = sorted(((sum(b.values()), ns) for ns, b in ledger.namespaces.items()),
                    key=lambda t: (-t[0], t[1]))
    account["namespaces"] = [_namespace(ns, ledger.namespaces[ns])
                             for _, ns in listed[:MAX_ACCOUNTED_NAMESPACES]]
    account["namespacesOmitted"] = max(0, len(listed) - MAX_ACCOUNTED_NAMESPACES)
    return account


def _badput(buckets: Mapping[Bucket, float]) -> BadputSecondsDict:
    return cast(BadputSecondsDict, {c: round(buckets.get(c, 0.0), 3) for c in CAUSES})


def _namespace(namespace: str, buckets: Mapping[Bucket, float]) -> NamespaceAccountDict:
    return {"namespace": namespace, "productive": round(buckets.get("productive", 0.0), 3),
            "serving": round(buckets.get("serving", 0.0), 3),
            "standby": round(buckets.get("standby", 0.0), 3), "badput": _badput(buckets),
            "total": round(sum(buckets.values()), 3)}


def from_status(account: Mapping[str, object] | None) -> Ledger | None:
    """The ledger status.accounting holds (a new leader's start), with no moment: the
    time until its first pass is unobserved. Namespaces left out of the status keep
    their seconds in the group's buckets only."""
    since, as_of = times.parse(_text(account, "since")), times.parse(_text(account, "asOf"))
    if account is None or since is None or as_of is None:
        return None
    group: dict[Bucket, float] = {state: _number(account.get(state)) for state in STATES}
    group.update(_causes(account.get("badput")))
    namespaces: dict[str, Mapping[Bucket, float]] = {}
    for entry in account.get("namespaces") or []:  # type: ignore[attr-defined]
        if isinstance(entry, Mapping) and entry.get("namespace"):
            namespaces[str(entry["namespace"])] = {
                "productive": _number(entry.get("productive")),
                "serving": _number(entry.get("serving")),
                "standby": _number(entry.get("standby")), **_causes(entry.get("badput"))}
    return Ledger(since, as_of, _number(account.get("acceleratorSeconds")), group, namespaces)


def _causes(badput: object) -> dict[Bucket, float]:
    found = badput if isinstance(badput, Mapping) else {}
    return {cause: _number(found.get(cause)) for cause in CAUSES}


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _text(account: Mapping[str, object] | None, key: str) -> str | None:
    value = (account or {}).get(key)
    return value if isinstance(value, str) else None
