"""Which nodes to quarantine and release, from what the nodes say and what workers reported.

Pure: nodes are plain dicts, the policy is the group's `Quarantine` model, time is a float.
A node is *unhealthy* when its Ready condition is not True (after a grace period: a
NotReady blip must not cost a restart), when a device-health agent's condition is True,
when another remediation system's taint is on it, or when the operator's probe found a bad
device. A job's reports (votes, paces: a tenant's word) only *hold* a node out of new
placements until a probe answers (Record.is_hold), within a budget per namespace.
The storm guard (like NHC's minHealthy) stops quarantining when too much of the group
would be out at once: a mass failure is more likely the network or the control plane than
that many bad nodes, and quarantining them all would only take the rest of the work down.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from goodput_operator import names, times
from goodput_operator.api.base import resolve
from goodput_operator.api.ultraservergroup import LEMON_HALF_LIFE_DAYS
from goodput_operator.health.signals import DeviceTaint, signal_of

if TYPE_CHECKING:
    from goodput_operator.api.ultraservergroup import Quarantine

Obj = dict[str, Any]
BY_OPERATOR, BY_HAND = "operator", "manual"
SDC = "SilentDataCorruption"
STRAGGLER = "Straggler"  # a rank persistently slower than its peers (health.straggler)
PROBED = frozenset({SDC, STRAGGLER})  # released after clean probes, not after time
BLAME_SECONDS = 900.0  # reports' blame not acted on by then is forgotten (the guard held it)
HOLD_SECONDS = 1800.0
"""How long a tenant's evidence may hold a node out of new placements with no probe
answering (probes off, an image that cannot test the node, a probe that cannot run): a
tenant's word asks for a probe, it never decides (TENANCY.md, rule 1)."""

REHOLD_SECONDS = 1800.0
"""How long after a tenant's hold on a node ended (a clean probe answered it, or
HOLD_SECONDS passed) tenants' reports against that node are held back (listed in the
group's status.heldEvidence with notBefore) instead of holding the node out again and
asking for another probe: one namespace's word costs at most one probe of a node, and one
hold, per hour (TENANCY.md, rule 4). Only the end of a tenant's own hold starts it: a
probe the admin's schedule or a probe-on-start ran answers no tenant, so it silences none."""


@dataclass(frozen=True)
class Finding:
    """Why a node is unhealthy, and since when (epoch seconds)."""

    reason: str  # CamelCase: NodeNotReady, NodeCondition, HealthTaint, SilentData...
    evidence: str
    since: float
    owner: str = ""  # namespace/name of the job whose reports blamed the node, if any
    failure_class: str = "node"  # accelerator, network, storage, ... (health.signals)


@dataclass(frozen=True)
class Record:
    """A quarantine as written on the node (taint + evidence annotation)."""

    reason: str
    evidence: str
    since: float  # when the problem began
    at: float  # when the node was quarantined
    by: str  # operator | manual
    owner: str = ""  # namespace/name of the job whose reports blamed it, if they did

    @property
    def is_hold(self) -> bool:
        """A job's reports (a tenant's evidence) put the node here: it is held out of new
        placements until a probe answers, not condemned (`is_hold` records raise no lemon
        score, and one clean probe run, or HOLD_SECONDS without an answer, ends them)."""
        return bool(self.owner) and self.reason in PROBED and self.by == BY_OPERATOR

    def answered(self, clean_probe_at: float | None) -> bool:
        """Whether a node's last clean probe run (CLEAN_PROBE_AT) came after this record
        began: what ends a hold (a clean run from before it answers nothing)."""
        return clean_probe_at is not None and clean_probe_at > self.at


@dataclass
class Decision:
    quarantine: list[tuple[str, Finding]] = field(default_factory=list)
    release: list[tuple[str, Record]] = field(default_factory=list)
    held: list[tuple[str, Finding]] = field(default_factory=list)  # stopped by the storm guard
    held_blame: list[tuple[str, Finding]] = field(default_factory=list)  # over the budget
    # held because a tenant's hold on the node ended lately: until when (REHOLD_SECONDS)
    not_before: dict[str, float] = field(default_factory=dict)
    storm: str | None = None  # why the storm guard holds, when it does
    wake_at: float | None = None  # when a grace period or release timer runs out


SILENCE_INTERVALS = 2  # a Lease silent for this many of its own renewal intervals, at least


@dataclass(frozen=True)
class Renewal:
    """A node's Lease as the operator has seen it renewed: the last renewal, and the
    longest of its recent intervals (a kubelet renews every 10 s; a simulated node, or a
    kubelet configured otherwise, may take much longer: each is judged by its own pace)."""

    at: float
    every: float

    def limit(self, policy: Quarantine) -> float:
        """The silence that fails the node."""
        return max(float(policy.lease_silence_seconds), SILENCE_INTERVALS * self.every)


def finding(node: Obj, policy: Quarantine, seen_since: float | None, now: float,
            renewal: Renewal | None = None, heard: float | None = None,
            devices: Sequence[DeviceTaint] = ()) -> Finding | None:
    """What is wrong with NODE now, if anything. SEEN_SINCE is when the operator first saw
    it unhealthy (some agents, and KWOK, leave stale transition times: the later wins).
    RENEWAL: its kubelet's Lease renewals (None: not known to renew it); HEARD: the newest
    renewal of any node. A silence counts only once other nodes have renewed after it ran
    out: when every Lease falls silent together, the control plane, the operator's watch
    or the sandbox's simulator has stalled, not the nodes."""
    said = signal_of(node, policy, devices)
    if said is not None:
        since = _later(times.parse(said.since), seen_since, now)
        return Finding(said.reason, said.evidence, since, failure_class=said.failure_class)
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    silence = policy.lease_silence_seconds
    if renewal is not None and silence:
        renewed, limit = renewal.at, renewal.limit(policy)
        # a kubelet back from a silence posts Ready before its next renewal is seen
        if ready is not None and ready.get("status") == "True":
            renewed = max(renewed, times.parse(ready.get("lastHeartbeatTime")) or 0.0)
        if now - renewed > limit and heard is not None and heard > renewed + limit:
            return Finding("NodeLeaseExpired", f"the kubelet has not renewed the node's Lease "
                           f"for {now - renewed:.0f}s (last renewal {times.millis(renewed)}; "
                           f"it renews "
                           f"every {renewal.every:.0f}s; the limit is {limit:.0f}s: "
                           f"leaseSilenceSeconds {silence} or {SILENCE_INTERVALS} of its "
                           "renewal intervals, the longer)", renewed + limit)
    if ready is None or ready.get("status") != "True":
        status = "missing" if ready is None else ready.get("status")
        since = _later(times.parse((ready or {}).get("lastTransitionTime")), seen_since, now)
        detail = f"{(ready or {}).get('reason', '')}: {(ready or {}).get('message', '')}"
        return Finding("NodeNotReady", f"Ready={status} ({detail.strip(': ')})", since)
    return None


def _later(transition: float | None, seen: float | None, now: float) -> float:
    known = [t for t in (transition, seen) if t is not None]
    return max(known) if known else now


def is_due(found: Finding, policy: Quarantine, now: float) -> bool:
    """NotReady waits out the grace period; every other finding counts at once."""
    if found.reason != "NodeNotReady":
        return True
    return bool(now >= found.since + policy.not_ready_grace_seconds)


def record_of(node: Obj) -> Record | None:
    """The node's quarantine, if it has our taint (hand-written ones too)."""
    taint = next((t for t in (node.get("spec") or {}).get("taints") or []
                  if t.get("key") == names.QUARANTINE_TAINT), None)
    if taint is None:
        return None
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(names.EVIDENCE_ANNOTATION)
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        data = {}
    added = times.parse(taint.get("timeAdded")) or 0.0
    return Record(str(data.get("reason") or taint.get("value") or "Manual"),
                  str(data.get("evidence", "")), times.parse(data.get("since")) or added,
                  times.parse(data.get("at")) or added, str(data.get("by", BY_HAND)),
                  str(data.get("owner") or ""))


def decide(nodes: Mapping[str, Obj], policy: Quarantine, now: float,
           seen_unhealthy: Mapping[str, float], healthy_since: Mapping[str, float],
           reported: Mapping[str, Finding], clean_probes: Mapping[str, int] | None = None,
           renewing: Mapping[str, Renewal] | None = None,
           device_taints: Mapping[str, Sequence[DeviceTaint]] | None = None,
           probed_at: Mapping[str, float] | None = None) -> Decision:
    """Quarantine what is due, release what has been healthy long enough, hold the rest.

    SEEN_UNHEALTHY: when the operator first saw each node unhealthy; HEALTHY_SINCE: when it
    last saw each node turn healthy; REPORTED: findings from workers (pod failures, SDC);
    CLEAN_PROBES: clean SDC probe runs in a row per node (what releases a corruption
    suspect); RENEWING: each node's Lease renewals (nodes seen renewing): a silence
    longer than Renewal.limit is a failure, and a pass is asked for when the earliest
    silence would become one; PROBED_AT: each node's last clean probe run (what answers a
    tenant's hold: Record.is_hold).
    """
    decision = Decision()
    heard = max((r.at for r in (renewing or {}).values()), default=None)
    out, out_blamed = 0, 0  # quarantined for health, and for corruption (reports, probes)
    out_by: dict[str, int] = {}  # nodes out on a namespace's jobs' reports
    due: list[tuple[str, Finding]] = []
    blamed: list[tuple[str, Finding]] = []
    failing: list[str] = []
    hold_ends: dict[str, float] = {}  # when a tenant's hold last ended, on nodes blamed now
    for name, node in nodes.items():
        record = record_of(node)
        renewal = (renewing or {}).get(name)
        health = finding(node, policy, seen_unhealthy.get(name), now, renewal, heard,
                         (device_taints or {}).get(name, ()))
        if renewal is not None and policy.lease_silence_seconds and health is None:
            # when its silence runs out; past that, until the others are heard after it
            _wake(decision, max(now + 1, renewal.at + renewal.limit(policy) + 0.1))
        found = health or reported.get(name)
        if record is not None:
            if record.reason in PROBED:
                out_blamed += 1
                if record.owner:
                    space = namespace_of(record.owner)
                    out_by[space] = out_by.get(space, 0) + 1
                if record.is_hold:
                    _judge_hold(decision, name, record, health, reported.get(name),
                                record.answered((probed_at or {}).get(name)), now)
                    continue
                needed = policy.release_after_clean_probes
                if found is None and needed and (clean_probes or {}).get(name, 0) >= needed:
                    decision.release.append((name, record))
                continue
            out += 1
            _maybe_release(decision, name, record, found, policy, now,
                           healthy_since.get(name, now))
            continue
        if found is None:
            continue
        if health is None:  # blamed by reports: judged apart from the node's health
            blamed.append((name, found))
            ended = hold_ended(node)
            if ended is not None:
                hold_ends[name] = ended
            continue
        failing.append(name)
        if is_due(health, policy, now):
            due.append((name, health))
        else:
            _wake(decision, health.since + policy.not_ready_grace_seconds)
    limit = resolve(policy.max_unavailable, len(nodes))  # 20% of 8 nodes is 2
    # nodes still in their grace period count too: failures that arrive together are
    # judged together, not quarantined one by one until the budget runs out
    if due and out + len(failing) > limit:
        decision.held = due
        decision.storm = (f"{len(failing)} node(s) failing with {out} already quarantined "
                          f"exceeds quarantine.maxUnavailable={policy.max_unavailable} "
                          f"({limit} of {len(nodes)} nodes): quarantining none of them; "
                          f"failing: {', '.join(sorted(failing)[:10])}")
    else:  # after the holds a probe's answer turned into quarantines (_judge_hold)
        decision.quarantine = [*due, *decision.quarantine]
    _spend_blame(decision, blamed, max(0, limit - out_blamed), max(1, limit // 2), out_by,
                 hold_ends, now)
    return decision


def _spend_blame(decision: Decision, blamed: list[tuple[str, Finding]], room: int,
                 share: int, out_by: dict[str, int], hold_ends: Mapping[str, float],
                 now: float) -> None:
    """Blame (a vote of a job's replicas, a probe) has a budget of its own (ROOM) and never
    trips the guard: a tenant's reports must not stop the quarantine of failing nodes for
    everybody. A probe's finding (the admin's image) goes first; the reports of one
    namespace's jobs hold at most SHARE nodes out at once (OUT_BY: how many they hold
    now), so one tenant's votes, forged or not, never use up another team's; and a node
    whose last tenant's hold ended lately (HOLD_ENDS) is not held again on a tenant's
    word before REHOLD_SECONDS: a namespace that asks again right after each answer
    would have the node probed, and held out, without end. A probe's own finding (no
    owner) is never held back. What does not fit is held (said in the group's
    status.heldEvidence) until it does."""
    for name, found in sorted(blamed, key=lambda b: (bool(b[1].owner), b[1].since, b[0])):
        space = namespace_of(found.owner) if found.owner else ""
        ended = hold_ends.get(name)
        if found.owner and ended is not None and now < ended + REHOLD_SECONDS:
            decision.held_blame.append((name, found))  # asked and answered: not again yet
            decision.not_before[name] = ended + REHOLD_SECONDS
            _wake(decision, ended + REHOLD_SECONDS)
        elif room > 0 and (not space or out_by.get(space, 0) < share):
            decision.quarantine.append((name, found))
            room -= 1
            if space:
                out_by[space] = out_by.get(space, 0) + 1
        else:
            decision.held_blame.append((name, found))


def _judge_hold(decision: Decision, name: str, record: Record, health: Finding | None,
                reported: Finding | None, answered: bool, now: float) -> None:
    """A tenant's hold on NAME ends when a probe answers: a bad run (a reported finding
    with no owner: the admin's image) makes it a quarantine of the admin's, a clean run
    since the hold began (ANSWERED) releases it. With no answer it ends after HOLD_SECONDS;
    while the node's own health is bad (an admin's signal) it stays out."""
    if reported is not None and not reported.owner:
        decision.quarantine.append((name, reported))
        return
    if health is not None:
        return
    if answered or now >= record.at + HOLD_SECONDS:
        decision.release.append((name, record))
    else:
        _wake(decision, record.at + HOLD_SECONDS)


def namespace_of(owner: str) -> str:
    """`ns/name` (a Finding's owner) -> `ns`."""
    return owner.partition("/")[0]


def _maybe_release(decision: Decision, name: str, record: Record, found: Finding | None,
                   policy: Quarantine, now: float, healthy_since: float) -> None:
    wait = policy.release_after_healthy_seconds
    if found is not None or record.by != BY_OPERATOR or wait == 0:
        return
    release_at = max(record.at, healthy_since) + wait
    if now >= release_at:
        decision.release.append((name, record))
    else:
        _wake(decision, release_at)


def _wake(decision: Decision, at: float) -> None:
    decision.wake_at = at if decision.wake_at is None else min(decision.wake_at, at)


def quarantine_patch(node: Obj, found: Finding, now: float, by: str = BY_OPERATOR,
                     half_life_days: float = LEMON_HALF_LIFE_DAYS) -> Obj:
    """Merge patch putting NODE in quarantine: taint, label, evidence annotation. Carries
    the node's resourceVersion, so a concurrent taint change makes it fail (409) instead of
    being overwritten; the next pass retries on the fresh node."""
    taints = [t for t in (node.get("spec") or {}).get("taints") or []
              if t.get("key") != names.QUARANTINE_TAINT]
    taints.append({"key": names.QUARANTINE_TAINT, "value": found.reason, "effect": "NoSchedule",
                   "timeAdded": times.millis(now)})
    evidence = {"reason": found.reason, "class": found.failure_class, "evidence": found.evidence,
                "since": times.millis(found.since), "at": times.millis(now), "by": by,
                **({"owner": found.owner} if found.owner else {})}
    annotations = {names.EVIDENCE_ANNOTATION: json.dumps(evidence)}
    if not found.owner:  # a tenant's hold is no incident of the node's (Record.is_hold)
        score, at = lemon_of((node.get("metadata") or {}).get("annotations") or {})
        lemon = decayed(score, at, now, half_life_days) + 1
        annotations |= {names.LEMON_ANNOTATION: f"{lemon:.3g}",
                        names.LEMON_AT_ANNOTATION: times.millis(now)}
    return {"metadata": {"resourceVersion": node["metadata"].get("resourceVersion"),
                         "labels": {names.QUARANTINE_LABEL: found.reason},
                         "annotations": annotations},
            "spec": {"taints": taints}}


def lemon_of(annotations: Mapping[str, str]) -> tuple[float, float | None]:
    """A node's incident score as last raised, and when (None: written before scores
    decayed, or by hand: taken as it is). The annotations survive releases."""
    try:
        score = max(0.0, float(annotations.get(names.LEMON_ANNOTATION, "0")))
    except ValueError:
        score = 0.0
    return (score if math.isfinite(score) else 0.0), times.parse(
        annotations.get(names.LEMON_AT_ANNOTATION))


def decayed(score: float, at: float | None, now: float, half_life_days: float) -> float:
    """SCORE raised at AT, as of NOW: it halves every HALF_LIFE_DAYS."""
    if at is None or now <= at or score <= 0:
        return score
    return float(score * 0.5 ** ((now - at) / (half_life_days * 86_400)))


def release_patch(node: Obj, hold_ended_at: float | None = None) -> Obj:
    """Merge patch taking NODE out of quarantine (the evidence annotation goes too). A
    tenant's hold ending (HOLD_ENDED_AT) is written on the node, where the next reports
    against it find it (`hold_ended`, REHOLD_SECONDS)."""
    taints = [t for t in (node.get("spec") or {}).get("taints") or []
              if t.get("key") != names.QUARANTINE_TAINT]
    annotations: dict[str, str | None] = {names.EVIDENCE_ANNOTATION: None}
    if hold_ended_at is not None:
        annotations[names.HOLD_ENDED_ANNOTATION] = times.millis(hold_ended_at)
    return {"metadata": {"resourceVersion": node["metadata"].get("resourceVersion"),
                         "labels": {names.QUARANTINE_LABEL: None},
                         "annotations": annotations},
            "spec": {"taints": taints or None}}


def hold_ended(node: Obj) -> float | None:
    """When a tenant's hold on NODE last ended (`release_patch`), if one did (a value
    edited by hand that does not parse is none)."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return times.parse_foreign(annotations.get(names.HOLD_ENDED_ANNOTATION))


def observe(name: str, unhealthy: bool, now: float, seen_unhealthy: dict[str, float],
            healthy_since: dict[str, float]) -> None:
    """Remember when NAME was first seen unhealthy, or healthy again (updates the maps)."""
    if unhealthy:
        seen_unhealthy.setdefault(name, now)
        healthy_since.pop(name, None)
    else:
        seen_unhealthy.pop(name, None)
        healthy_since.setdefault(name, now)
