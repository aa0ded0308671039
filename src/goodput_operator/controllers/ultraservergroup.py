"""UltraServerGroup controller: applies what decide.group decided — quarantine and release
patches, node labels, probe Jobs — then the status write and the events.

Runs in the same loop as the TrainingJobs, before them: a node quarantined in this pass is
already out of the fleet when the jobs on it are recovered, in the same pass. Node patches
return the node, which goes straight into the state (the watch event may come later).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from kubernetes.client.exceptions import ApiException

from goodput_operator import metrics
from goodput_operator.controllers.kube import Gone, Kube, log_failures, patch_status
from goodput_operator.controllers.state import State
from goodput_operator.decide import Event, Failure, GroupDecision, ProbeStart, decide_groups
from goodput_operator.health import notices
from goodput_operator.health import quarantine as q
from goodput_operator.resources.probe import probe_job

Obj = dict[str, Any]
T = TypeVar("T")
log = logging.getLogger("goodput.ultraservergroup")
PLURAL = "ultraservergroups"
LABEL_CONCURRENCY = 8  # members' label writes at once, in the background (label_nodes)


def observe_health(state: State, members: Mapping[str, Mapping[str, Obj]], now: float) -> None:
    """Remember when each member node was first seen unhealthy, or healthy again, and
    when its notice was first seen: the grace periods, release timers and save deadlines
    count from there."""
    for name, spec in state.groups.items():
        for node_name, node in members.get(name, {}).items():
            unhealthy = q.finding(node, spec.quarantine, None, now, devices=state.device_taints
                                  .get(node_name, ())) is not None
            q.observe(node_name, unhealthy, now, state.seen_unhealthy, state.healthy_since)
            notices.observe(node_name, node, now, state.noticed)


async def reconcile_groups(state: State, kube: Kube, now: float) -> asyncio.Future[Any]:
    """Decide every group and apply what the jobs' decisions read (quarantines, releases,
    labels: the nodes); returns the groups' status writes, started but not awaited: the
    caller decides the jobs first (a quarantined node's job is re-placed without waiting
    for its group's status write, over a second on a busy API server) and awaits them
    before its pass ends."""
    snapshot = state.snapshot(now, with_members=True)
    observe_health(state, snapshot.members, now)  # the snapshot sees it: views, not copies
    failures: list[Failure] = []
    decisions = decide_groups(snapshot, failures)
    log_failures(failures)
    keep_accounts(state, decisions)
    writes = []
    for decision in decisions:
        events = await _guarded(state, decision.name, apply_group(state, kube, decision, now))
        if events is not None:
            writes.append(_guarded(state, decision.name,
                                   write_group(state, kube, decision, events, now)))
    label_nodes(state, kube, [label for d in decisions for label in d.labels])
    return asyncio.ensure_future(asyncio.gather(*writes))


def keep_accounts(state: State, decisions: list[GroupDecision]) -> None:
    """Each group's accounting as this pass counted it (the next pass goes on from it,
    written or not) and its jobs as seen; its figures as metrics."""
    state.accounted = {}
    for decision in decisions:
        if decision.ledger is None:
            continue
        state.accounts[decision.name] = decision.ledger
        state.accounted.update(decision.seen)
        metrics.account(decision.name, decision.desired.get("accounting") or {})


async def _guarded(state: State, name: str, work: Awaitable[T]) -> T | None:
    """WORK for group NAME; None when it failed: a gone group is forgotten, and one bad
    group must not stop the others or the jobs."""
    try:
        return await work
    except asyncio.CancelledError:
        raise
    except Gone as gone:
        log.info("%s is gone: forgotten", gone)
        state.remove_group(name)
    except Exception:
        metrics.RECONCILE_ERRORS.labels("UltraServerGroup").inc()
        log.exception("reconcile of UltraServerGroup %s failed", name)
    return None


async def apply_group(state: State, kube: Kube, decision: GroupDecision, now: float
                      ) -> list[tuple[Obj, Event]]:
    """What the jobs read: quarantines, releases, labels (and probes started); the events
    to post after the group's status write."""
    name, body = decision.name, decision.body
    for node in decision.forget_blame:  # out of service already, orphaned or expired
        state.blamed.pop(node, None)
    state.wake_at(decision.wake_at)
    if decision.sweep_mark is not None:
        state.last_sweep[name] = decision.sweep_mark
    events = list(decision.events)
    on_nodes: list[tuple[Obj, Event]] = []
    for quarantine in decision.quarantine:
        patched = await _patch_node(kube, quarantine.node, quarantine.patch)
        if patched is None:
            continue
        state.upsert_node(patched)
        state.blamed.pop(quarantine.node, None)
        log.warning("%s (group %s)", quarantine.message, name)
        if quarantine.finding.owner:  # a tenant's reports: a hold until a probe answers
            on_nodes.append((patched, Event("Warning", "HeldForProbe", quarantine.message)))
            events.append(Event("Warning", "NodeHeldForProbe", quarantine.message))
            continue
        on_nodes.append((patched, Event("Warning", "Quarantined", quarantine.message)))
        events.append(Event("Warning", "NodeQuarantined", quarantine.message))
        metrics.QUARANTINES.labels(name, quarantine.finding.reason,
                                   quarantine.finding.failure_class).inc()
    for release in decision.release:
        patched = await _patch_node(kube, release.node, release.patch)
        if patched is None:
            continue
        state.upsert_node(patched)
        state.clean_probes.pop(release.node, None)
        log.info("%s (group %s)", release.message, name)
        on_nodes.append((patched, Event("Normal", "Released", release.message)))
        events.append(Event("Normal", "NodeReleased", release.message))
    sweep = [p for p in decision.probes if p.trigger == "schedule"]
    if sweep:
        log.info("group %s: scheduled probe sweep of %d idle node(s)", name, len(sweep))
    for probe in decision.probes:
        await start_probe(state, kube, probe)
    if decision.storm and any(e.reason == "StormGuard" for e in decision.events):
        log.error("group %s: %s", name, decision.storm)
    metrics.QUARANTINED.labels(name).set(decision.desired["totals"]["quarantined"])
    metrics.STORM_GUARD.labels(name).set(1 if decision.storm else 0)
    return [*on_nodes, *((body, event) for event in events)]


async def write_group(state: State, kube: Kube, decision: GroupDecision,
                      events: list[tuple[Obj, Event]], now: float) -> None:
    """The group's status write, then EVENTS (in the background)."""
    if decision.write:
        await patch_status(kube, PLURAL, None, decision.name, decision.desired)
        decision.body["status"] = {**(decision.body.get("status") or {}), **decision.desired}
        state.group_written[decision.name] = now
    post_events(kube, events)


_posting: set[asyncio.Future[Any]] = set()  # events on their way (a task must be held)


def post_events(kube: Kube, events: list[tuple[Obj, Event]]) -> None:
    """Post EVENTS in the background, all at once: they are best effort, and a quarantine's
    job must not wait for them (the lane that re-places it follows this group's apply)."""
    if not events:
        return
    task = asyncio.ensure_future(asyncio.gather(*(
        asyncio.to_thread(kube.event, obj, event.reason, event.message, event.type)
        for obj, event in events)))
    _posting.add(task)
    task.add_done_callback(_posted)


def _posted(task: asyncio.Future[Any]) -> None:
    _posting.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("could not post events: %s", task.exception())


async def start_probe(state: State, kube: Kube, probe: ProbeStart) -> None:
    """Probe run RUN of NODE, unless that Job exists."""
    spec = state.groups.get(probe.group)
    if spec is None:
        return
    job = probe_job(probe.node, probe.run, state.settings.probe_namespace,
                    spec.probes.image or state.settings.probe_image, state.settings.report_url,
                    spec.accelerator.resource, spec.accelerator.per_node, probe.trigger)
    try:
        created = await asyncio.to_thread(kube.create, job)
    except ApiException as err:
        log.warning("cannot start probe Job %s/%s: %s", state.settings.probe_namespace,
                    job["metadata"]["name"], err.reason)
        return
    if created is not None:
        metrics.PROBE_JOBS.labels(probe.trigger).inc()
        log.info("probing %s (run %d, %s): Job %s/%s", probe.node, probe.run, probe.trigger,
                 state.settings.probe_namespace, job["metadata"]["name"])


async def _patch_node(kube: Kube, name: str, patch: Obj) -> Obj | None:
    """The patched node, or None when it changed under us (409) or is gone (404): the
    next pass decides again from the fresh node."""
    return await asyncio.to_thread(_patch_or_none, kube, name, patch)


def _patch_or_none(kube: Kube, name: str, patch: Obj) -> Obj | None:
    try:
        return kube.patch_node(name, patch)
    except ApiException as err:
        if err.status in (404, 409):
            log.info("node %s changed or went away during the patch; retrying", name)
            return None
        raise


def label_nodes(state: State, kube: Kube, wanted: list[tuple[str, dict[str, str]]]) -> None:
    """goodput.dev/group, /domain and /slot on each member that lacks them (WANTED: every
    group's), for kubectl and other tools: written in the background by LABEL_CONCURRENCY
    writers on the bulk threads, so no pass waits for them and no pod write gives way to
    them (20,000 new nodes held every pass's groups stage 6-11 s, 256 labels a pass). What
    is asked for replaces what was still waiting; a node being written is asked for again
    only after its write ends."""
    state.labels_wanted = {name: want for name, want in wanted
                           if name not in state.labels_writing}
    while state.labels_wanted and len(state.labelers) < LABEL_CONCURRENCY:
        task = asyncio.ensure_future(_labeler(state, kube))
        state.labelers.add(task)
        task.add_done_callback(state.labelers.discard)


async def _labeler(state: State, kube: Kube) -> None:
    while state.labels_wanted:
        name, want = state.labels_wanted.popitem()
        state.labels_writing.add(name)
        try:
            patched = await state.bulk(_patch_or_none, kube, name,
                                       {"metadata": {"labels": want}})
        except Exception as err:  # the next pass asks again
            log.warning("cannot label node %s: %s", name, err)
            patched = None
        finally:
            state.labels_writing.discard(name)
        if patched is not None:
            state.upsert_node(patched)
