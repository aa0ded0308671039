"""UltraServerGroup reconcile: label the group's nodes, quarantine and release them by the
group's policy (health/quarantine decides), and write the per-domain status.

Runs in the same loop as the TrainingJobs, before them: a node quarantined in this pass is
already out of the fleet when the jobs on it are recovered, in the same pass. Node patches
return the node, which goes straight into the state (the watch event may come later).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from kubernetes.client.exceptions import ApiException

from goodput_operator import metrics, names
from goodput_operator.api.conditions import is_true, set_condition
from goodput_operator.api.ultraservergroup import UltraServerGroupSpec
from goodput_operator.controllers.kube import Kube
from goodput_operator.controllers.state import State
from goodput_operator.health import cron
from goodput_operator.health import quarantine as q
from goodput_operator.resources.probe import probe_job
from goodput_operator.topology.model import Domain, Fleet

Obj = dict[str, Any]
log = logging.getLogger("goodput.ultraservergroup")
PLURAL = "ultraservergroups"
STATUS_INTERVAL = 2.0  # seconds between writes of usage-only changes
LABEL_CONCURRENCY = 16


async def reconcile_groups(state: State, kube: Kube, now: float) -> None:
    for name in list(state.groups):
        try:
            await reconcile_group(state, kube, name, now)
        except asyncio.CancelledError:
            raise
        except Exception:  # one bad group must not stop the others or the jobs
            metrics.RECONCILE_ERRORS.labels("UltraServerGroup").inc()
            log.exception("reconcile of UltraServerGroup %s failed", name)


async def reconcile_group(state: State, kube: Kube, name: str, now: float) -> None:
    spec, body, fleet = state.groups[name], state.group_objects[name], state.fleets[name]
    policy = spec.quarantine
    members = {n["metadata"]["name"]: n for n in state.members(name)}
    for node_name, node in members.items():
        unhealthy = q.finding(node, policy, None, now) is not None
        q.observe(node_name, unhealthy, now, state.seen_unhealthy, state.healthy_since)
    for node_name in [n for n in state.blamed if n in members and q.record_of(members[n])]:
        del state.blamed[node_name]  # already out of service: the blame is moot
    reported = {n: f for n, f in state.blamed.items() if n in members}
    decision = q.decide(members, policy, now, state.seen_unhealthy, state.healthy_since,
                        reported, state.clean_probes)
    state.wake_at(decision.wake_at)
    events: list[tuple[str, str, str]] = []
    for node_name, found in decision.quarantine:
        patched = await _patch_node(kube, node_name,
                                    q.quarantine_patch(members[node_name], found, now))
        if patched is None:
            continue
        state.upsert_node(patched)
        state.blamed.pop(node_name, None)
        message = f"quarantined {node_name}: {found.reason}: {found.evidence}"
        log.warning("%s (group %s)", message, name)
        await asyncio.to_thread(kube.event, patched, "Quarantined", message, "Warning")
        events.append(("Warning", "NodeQuarantined", message))
        metrics.QUARANTINES.labels(name, found.reason).inc()
    for node_name, record in decision.release:
        patched = await _patch_node(kube, node_name, q.release_patch(members[node_name]))
        if patched is None:
            continue
        state.upsert_node(patched)
        message = (f"released {node_name} from quarantine ({record.reason}): " + (
            f"{state.clean_probes.pop(node_name, 0)} clean probe runs in a row"
            if record.reason == q.SDC else
            f"healthy for {policy.release_after_healthy_seconds}s"))
        log.info("%s (group %s)", message, name)
        await asyncio.to_thread(kube.event, patched, "Released", message)
        events.append(("Normal", "NodeReleased", message))
    await _label_nodes(state, kube, name, fleet)
    if spec.probes.on_suspicion:
        await _probe_suspects(state, kube, spec, members)
    schedule_error = await _sweep(state, kube, name, spec, fleet, now)

    status = dict(body.get("status") or {})
    desired = group_status(spec, fleet, status.get("conditions") or [], decision.storm,
                           body["metadata"].get("generation"), schedule_error)
    if decision.storm and not is_true(status.get("conditions") or [], "StormGuard"):
        events.append(("Warning", "StormGuard", decision.storm))
        log.error("group %s: %s", name, decision.storm)
    metrics.QUARANTINED.labels(name).set(desired["totals"]["quarantined"])
    metrics.STORM_GUARD.labels(name).set(1 if decision.storm else 0)
    if _due(state, name, status, desired, now):
        await asyncio.to_thread(kube.patch_status, PLURAL, None, name, desired)
        body["status"] = {**status, **desired}
        state.group_written[name] = now
    for type_, reason, message in events:
        await asyncio.to_thread(kube.event, body, reason, message, type_)


async def _probe_suspects(state: State, kube: Kube, spec: UltraServerGroupSpec,
                          members: dict[str, Obj]) -> None:
    """Keep one probe Job running on each node quarantined for corruption until it has
    enough clean runs; each result lets the next run start (Job names count the runs)."""
    for node_name, node in members.items():
        record = q.record_of(node)
        if record is None or record.reason != q.SDC:
            continue
        if state.clean_probes.get(node_name, 0) >= spec.quarantine.release_after_clean_probes:
            continue
        await start_probe(state, kube, spec, node_name, "suspicion")


async def start_probe(state: State, kube: Kube, spec: UltraServerGroupSpec, node: str,
                       trigger: str, run: int | None = None) -> None:
    """Probe run RUN of NODE (default: the results received so far), unless that Job
    exists."""
    run = state.probe_runs.get(node, 0) if run is None else run
    job = probe_job(node, run, state.probe_namespace, spec.probes.image or state.probe_image,
                    state.report_url, spec.accelerator.resource, spec.accelerator.per_node,
                    trigger)
    try:
        created = await asyncio.to_thread(kube.create, job)
    except ApiException as err:
        log.warning("cannot start probe Job %s/%s: %s", state.probe_namespace,
                    job["metadata"]["name"], err.reason)
        return
    if created is not None:
        metrics.PROBE_JOBS.labels(trigger).inc()
        log.info("probing %s (run %d, %s): Job %s/%s", node, run, trigger,
                 state.probe_namespace, job["metadata"]["name"])


async def _sweep(state: State, kube: Kube, group: str, spec: UltraServerGroupSpec,
                 fleet: Fleet, now: float) -> str | None:
    """On the group's probe schedule, probe every idle healthy node. Returns why the
    schedule is unusable, if it is."""
    schedule = spec.probes.schedule
    if not schedule:
        return None
    last = state.last_sweep.setdefault(group, now)
    try:
        is_due = cron.due(schedule, last, now)
    except cron.CronError as err:
        return str(err)
    state.wake_at(now - now % 60 + 60.5)  # look again at the next minute
    if not is_due:
        return None
    state.last_sweep[group] = now
    idle = [n.name for n in fleet.nodes.values() if n.healthy and not n.pods]
    log.info("group %s: scheduled probe sweep of %d idle node(s)", group, len(idle))
    for node in idle:
        await start_probe(state, kube, spec, node, "schedule", int(now))
    return None


def _due(state: State, name: str, status: Obj, desired: Obj, now: float) -> bool:
    """Write the status when it changed: at once when health, conditions or membership
    did, at most every STATUS_INTERVAL seconds when only usage counters moved (a gang
    launch changes them with every pod; the last change is written when the interval
    is over)."""
    if all(status.get(k) == v for k, v in desired.items()):
        return False
    if _shape(status) != _shape(desired):
        return True
    since = now - state.group_written.get(name, 0.0)
    if since >= STATUS_INTERVAL:
        return True
    state.wake_at(now + STATUS_INTERVAL - since)
    return False


def _shape(status: Obj) -> tuple[object, ...]:
    """The status without its usage counters (free accelerators)."""
    totals = {k: v for k, v in (status.get("totals") or {}).items() if k != "freeAccelerators"}
    domains = [{k: v for k, v in d.items() if k != "freeAccelerators"}
               for d in status.get("domains") or []]
    return (status.get("health"), status.get("observedGeneration"), repr(totals),
            repr(domains), repr(status.get("conditions")))


async def _patch_node(kube: Kube, name: str, patch: Obj) -> Obj | None:
    """The patched node, or None when it changed under us (409) or is gone (404): the
    next pass decides again from the fresh node."""
    try:
        return await asyncio.to_thread(kube.patch_node, name, patch)
    except ApiException as err:
        if err.status in (404, 409):
            log.info("node %s changed or went away during the patch; retrying", name)
            return None
        raise


async def _label_nodes(state: State, kube: Kube, group: str, fleet: Fleet) -> None:
    """goodput.dev/group, /domain and /slot on each member, for kubectl and other tools
    (a new group's nodes are labelled LABEL_CONCURRENCY at a time)."""
    wanted: list[tuple[str, dict[str, str]]] = []
    for domain in fleet.ordered_domains():
        for node in domain.nodes:
            want = {names.GROUP_LABEL: group, names.NODE_DOMAIN_LABEL: domain.id,
                    names.SLOT_LABEL: str(node.slot)}
            labels = state.nodes[node.name]["metadata"].get("labels") or {}
            if any(labels.get(k) != v for k, v in want.items()):
                wanted.append((node.name, want))
    wanted = wanted[:state.take_writes(len(wanted))]  # 2,000 new nodes: over a few passes
    limit = asyncio.Semaphore(LABEL_CONCURRENCY)

    async def label(name: str, want: dict[str, str]) -> Obj | None:
        async with limit:
            return await _patch_node(kube, name, {"metadata": {"labels": want}})

    for patched in await asyncio.gather(*(label(n, w) for n, w in wanted)):
        if patched is not None:
            state.upsert_node(patched)


def domain_health(domain: Domain, nodes_per_domain: int) -> str:
    healthy = sum(1 for n in domain.nodes if n.healthy)
    if healthy == 0:
        return "Failed"
    if healthy == len(domain.nodes) == nodes_per_domain:
        return "Healthy"
    return "Degraded"


def group_status(spec: UltraServerGroupSpec, fleet: Fleet, conditions: list[Obj],
                 storm: str | None, generation: int | None,
                 schedule_error: str | None = None) -> Obj:
    """The group's status from its fleet model: per domain, totals, health, conditions."""
    domains: list[Obj] = []
    totals: Counter[str] = Counter()
    misshaped: list[str] = []
    for domain in fleet.ordered_domains():
        health = domain_health(domain, spec.nodes_per_domain)
        ready = [n for n in domain.nodes if n.healthy]
        quarantined = [n.name for n in domain.nodes if n.state == "quarantined"]
        spares = [n.name for n in domain.nodes if n.spare]
        free = sum(n.free for n in ready if not n.spare)
        domains.append({"id": domain.id, "health": health, "nodesReady": len(ready),
                        "nodesTotal": len(domain.nodes), "freeAccelerators": free,
                        "quarantinedNodes": quarantined, "spares": spares})
        if len(domain.nodes) != spec.nodes_per_domain:
            misshaped.append(f"{domain.id} has {len(domain.nodes)} of "
                             f"{spec.nodes_per_domain} nodes")
        misshaped += [f"{n.name} has {n.capacity} of {spec.accelerator.per_node} "
                      f"{spec.accelerator.resource}" for n in domain.nodes
                      if n.state == "misshaped"]
        totals.update(domains=1, healthyDomains=int(health == "Healthy"), nodes=len(domain.nodes),
                      readyNodes=len(ready), accelerators=sum(n.capacity for n in ready),
                      freeAccelerators=free, quarantined=len(quarantined), spares=len(spares))
    healths = {d["health"] for d in domains}
    group_health = "Empty" if not domains else "Healthy" if healths == {"Healthy"} else \
        "Failed" if healths == {"Failed"} else "Degraded"
    usable = group_health in ("Healthy", "Degraded")
    conditions = set_condition(
        conditions, "Ready", usable, "DomainsAvailable" if usable else
        ("NoNodes" if not domains else "NoHealthyNodes"),
        f"{totals['healthyDomains']}/{totals['domains']} domains healthy, "
        f"{totals['readyNodes']}/{totals['nodes']} nodes ready" if domains else
        f"no node matches spec.nodeSelector {spec.node_selector}", generation)
    degraded = [f"{d['id']} {d['health']}" for d in domains if d["health"] != "Healthy"]
    conditions = set_condition(
        conditions, "Degraded", bool(degraded), "DomainsDegraded" if degraded else "AllHealthy",
        ", ".join(degraded[:20]), generation)
    conditions = set_condition(conditions, "StormGuard", storm is not None,
                               "TooManyFailing" if storm else "WithinBudget", storm or "",
                               generation)
    conditions = set_condition(conditions, "MisShaped", bool(misshaped),
                               "ShapeMismatch" if misshaped else "AsDeclared",
                               "; ".join(misshaped[:20]), generation)
    if spec.spares.per_group:
        conditions = set_condition(conditions, "SparesPerGroup", False, "NotSupported",
                                   f"spares.perGroup={spec.spares.per_group} is not honoured "
                                   "yet; only spares.perDomain holds nodes back", generation)
    conditions = set_condition(
        conditions, "ProbesScheduled", bool(spec.probes.schedule) and not schedule_error,
        "InvalidSchedule" if schedule_error else "Scheduled" if spec.probes.schedule
        else "Disabled", schedule_error or (f"probing idle nodes on '{spec.probes.schedule}'"
                                            if spec.probes.schedule else
                                            "spec.probes.schedule is empty"), generation)
    return {"observedGeneration": generation, "health": group_health,
            "totals": {k: totals[k] for k in ("domains", "healthyDomains", "nodes",
                                              "readyNodes", "accelerators",
                                              "freeAccelerators", "quarantined", "spares")},
            "domains": domains, "conditions": conditions}
