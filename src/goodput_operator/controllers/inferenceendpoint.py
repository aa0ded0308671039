"""InferenceEndpoint controller and autoscaler.

The controller runs in the operator's one loop, after the TrainingJobs: decide.endpoint
decides every endpoint on one snapshot (placing whole replica groups inside one domain),
then this applies the decisions, one status write each. The autoscaler is an asyncio task
beside it: per endpoint, every `scaling.intervalSeconds`, it queries Prometheus, asks
autoscaling.recommend, and hands the decision to the loop (State.scaled), which writes it
(status, event) with everything else.

Not a kopf timer: kopf timers force a finalizer onto every object they run for
(nolar/kopf#1074), and a finalizer would block deleting endpoints while the operator is
down; nothing here needs one, children are garbage-collected through owner references.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from kubernetes.client.exceptions import ApiException

from goodput_operator import metrics, times
from goodput_operator.api.conditions import set_condition
from goodput_operator.api.inferenceendpoint import InferenceEndpointSpec, ServingRole
from goodput_operator.autoscaling import prometheus
from goodput_operator.autoscaling.algorithm import Decision, History, Sample, recommend
from goodput_operator.controllers import routing
from goodput_operator.controllers.kube import (
    Kube,
    api_message,
    apply_each,
    apply_quota,
    log_failures,
    unless_refused,
    write_status,
)
from goodput_operator.controllers.state import State
from goodput_operator.decide import Event, Failure, Scaled, decide_endpoints, trial, turns
from goodput_operator.decide.creates import WriteBudget
from goodput_operator.decide.endpoint import EndpointDecision
from goodput_operator.decide.regions import REGIONS
from goodput_operator.decide.roles import desired_replicas, role_requests, scaling_ceiling
from goodput_operator.resources import inference as build
from goodput_operator.resources.fabric import Fabric
from goodput_operator.resources.pods import owned, pin

Obj = dict[str, Any]
log = logging.getLogger("goodput.inferenceendpoint")
PLURAL = "inferenceendpoints"
QUERY_SECONDS = 5.0  # one Prometheus query's deadline, the answer read whole
EVALUATIONS = 16  # endpoints evaluated at once


async def apply_endpoint(state: State, kube: Kube, decided: EndpointDecision) -> None:
    ie = decided.ie
    meta = ie["metadata"]
    metrics.SCALING_LIMITED.labels(*decided.key).set(1 if decided.limited else 0)
    if decided.create:
        try:
            await asyncio.gather(*(asyncio.to_thread(kube.create, body)
                                   for body in decided.services))
        except ApiException as err:  # e.g. the cluster's service IP range is full
            reason = api_message(err)
            decided.desired["conditions"] = set_condition(
                decided.desired.get("conditions") or [], "Ready", False,
                "ServiceCreateFailed", f"cannot create the endpoint's Service: {reason}",
                meta.get("generation"), times.seconds(time.time()))
            decided.events.append(Event("Warning", "ServiceCreateFailed", reason))
    pins = [state.bulk(kube.patch_pod, meta["namespace"], pod["metadata"]["name"],
                       pin(pod, node, domain)) for pod, node, domain in decided.pin]
    for pinned in await asyncio.gather(*pins):  # pinned pods first: they are placed
        state.upsert_pod(pinned)
    refused: list[str] = []

    async def create(body: Obj) -> None:
        key = f"{meta['namespace']}/{body['metadata']['name']}"
        created = None
        try:
            created = await unless_refused(state.bulk(kube.create, body), body, refused)
        finally:
            if body["kind"] == "Pod":  # a pod created pinned holds its node from now on;
                if created is not None:  # one refused gives back what was reserved for it
                    state.upsert_pod(created)
                elif key not in state.pods:
                    state.release_reservation(key)

    group = state.groups.get(ie["spec"].get("ultraServerGroup", ""))
    sources = build.claim_sources(ie, decided.create, group.accelerator.device_class
                                  if group is not None else None)
    await asyncio.gather(*(create(body) for body in sources))  # before the pods claiming
    await asyncio.gather(*(create(body) for body in decided.create))
    if decided.create:  # refused ones back off (Refusal.retry_at), created ones clear it
        state.note_creates(decided.key, refused[0] if refused else None, time.time())
    if refused or decided.key in state.refused:  # said on the endpoint until created
        refused = refused or [state.refused[decided.key].message]
        if not any(c["type"] == "Ready" and c["reason"] == "PodCreateRefused"
                   for c in decided.status.get("conditions") or []):  # once, not per pass
            decided.events.append(Event("Warning", "PodCreateRefused", refused[0]))
        decided.desired["conditions"] = set_condition(
            decided.desired.get("conditions") or [], "Ready", False, "PodCreateRefused",
            f"the API server refused the replicas' pods: {refused[0]}",
            meta.get("generation"), times.seconds(time.time()))
    await asyncio.gather(*(state.bulk(kube.delete_pod, meta["namespace"], name)
                           for name in decided.delete))
    await _replicas(state, kube, decided)
    if decided.weights and state.settings.haproxy_runtime_api:
        failed = await routing.set_weights(
            routing.RuntimeApi(state.settings.haproxy_runtime_api), decided.weights)
        if failed:  # said on the endpoint; the next pass sets them again
            decided.events.append(Event("Warning", "RoutingFailed", failed[0]))
            decided.desired["conditions"] = set_condition(
                decided.desired.get("conditions") or [], "Routed", False, "ProxyRefused",
                f"the proxy refused a weight: {failed[0]}", meta.get("generation"),
                times.seconds(time.time()))
    await write_status(kube, PLURAL, ie, decided.status, decided.desired, decided.events)
    await apply_quota(kube, decided.quota, state.note_workload)


async def _replicas(state: State, kube: Kube, decided: EndpointDecision) -> None:
    """A multi-region endpoint's replicas to send (MultiKueue takes them from here) and
    to delete (MultiKueue deletes their copies in the regions). A replica the API server
    refuses for good (a quota, a webhook) backs the endpoint's sending off (Refusal)."""
    namespace = decided.ie["metadata"]["namespace"]
    refused: list[str] = []
    done = await asyncio.gather(
        *(unless_refused(asyncio.to_thread(kube.create, body), body, refused)
          for body in decided.children),
        *(asyncio.to_thread(kube.delete_custom, PLURAL, namespace, name)
          for name in decided.drop), return_exceptions=True)
    if decided.children:
        state.note_creates(decided.key, refused[0] if refused else None, time.time())
    if refused:
        decided.events.append(Event("Warning", "ReplicaCreateRefused", refused[0]))
    for failed in (r for r in done if isinstance(r, ApiException)):  # the next pass retries
        decided.events.append(Event("Warning", "ReplicaWriteFailed", api_message(failed)))
    for raised in (r for r in done if isinstance(r, BaseException)
                   and not isinstance(r, ApiException)):
        raise raised


async def reconcile_endpoints(state: State, kube: Kube, clock: float) -> None:
    """Decide every endpoint on one snapshot, make their reservations and take their
    writes from the pass's budget, then apply them."""
    failures: list[Failure] = []
    snapshot = state.snapshot(clock)
    budget = WriteBudget(state.write_budget)
    with trial(snapshot):
        decisions = decide_endpoints(snapshot, failures, budget)
    state.write_budget = budget.left
    state.defer_writes(budget.deferred)
    state.note_turns([*turns.granted(snapshot, "InferenceEndpoint"),
                      *turns.granted(snapshot, REGIONS)], clock)
    for decision in decisions:  # before any await: reservations hold from now on
        state.reserve(decision.reservations)
        state.wake_at(decision.wake_at)
        for role in decision.scaling_recorded:
            key = (*decision.key, role)
            if (scaled := state.scaled.get(key)) is not None:
                state.scaled[key] = dataclasses.replace(scaled, written=True)
    log_failures(failures)
    await apply_each("InferenceEndpoint", decisions,
                     lambda decided: apply_endpoint(state, kube, decided),
                     lambda decided: decided.ie,
                     lambda decided: state.remove_endpoint(*decided.key))


# ---- the autoscaler ---------------------------------------------------------------------

async def evaluate(state: State, ie: Obj, spec: InferenceEndpointSpec, role: ServingRole,
                   now: float, queries: Executor | None = None) -> None:
    """Query ROLE's metrics, decide its size, and hand the decision to the loop.
    QUERIES: the threads Prometheus is read on (the autoscaler's own: a query past its
    deadline goes on reading there, never on the API calls' threads)."""
    scaling = role.scaling
    assert scaling is not None
    meta = ie["metadata"]
    key = (meta["namespace"], meta["name"], role.name)
    url = scaling.prometheus_url or state.settings.prometheus_url
    current = desired_replicas(state.scaled.get(key), ie, role)
    allow = [state.settings.prometheus_url, *state.settings.prometheus_allow]
    if not prometheus.allowed(url, allow):
        why = (f"scaling.prometheusUrl {url} is not one the operator may query "
               "(its --prometheus-url or --prometheus-allow)")
        _record(state, key, Decision(current, f"holding {current}: {why}", {},
                                     unavailable=why), current, now)
        return
    samples = []
    for metric in scaling.metrics:
        promql = prometheus.query_for(metric, meta["namespace"], meta["name"],
                                      scaling.metric_names, role.name)
        try:
            value = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(
                queries, functools.partial(prometheus.instant, url, promql, QUERY_SECONDS,
                                           4.0 * scaling.interval_seconds, allow=allow)),
                QUERY_SECONDS)
        except (prometheus.PrometheusError, TimeoutError) as err:
            previous = state.scaled.get(key)
            if previous is None or previous.decision.unavailable is None:  # once per outage
                log.warning("%s/%s%s: %s", meta["namespace"], meta["name"],
                            f" ({role.name})" if role.name else "",
                            err or f"no answer from {url} within {QUERY_SECONDS}s")
            value = None
        samples.append(Sample(metric.type, metric.target, value, metric.type))
    fleet = state.fleets.get(spec.ultra_server_group)
    capacity = None  # multiRegion: the regions' room is decide.regions' to weigh
    if fleet is not None and spec.multi_region is None:  # decide.roles.scaling_ceiling
        capacity = scaling_ceiling(
            fleet, ie, spec, role, owned(state.endpoint_pods.get(key[:2], {}).values(), ie),
            role_requests(state.nodes, state.fits, fleet, ie, spec,
                          Fabric.of(state.groups[spec.ultra_server_group])))
    history = state.scaling_history.setdefault(key, History())
    decision = recommend(samples, current, scaling, history, now, capacity)
    _record(state, key, decision, current, now)
    if decision.desired != current:
        log.info("%s/%s%s: %d -> %d: %s", meta["namespace"], meta["name"],
                 f" ({role.name})" if role.name else "", current, decision.desired,
                 decision.reason)
        metrics.SCALING_DECISIONS.labels("up" if decision.desired > current else "down").inc()


def _record(state: State, key: tuple[str, str, str], decision: Decision, current: int,
            now: float) -> None:
    """Hand the decision to the loop, which writes it. A decision no pass has written
    yet (two evaluations came before the next pass: a busy operator) is replaced, but the
    size it changed FROM stays the one the status shows, so the change is still recorded
    (status.lastScaling, an event) when the pass writes the new one."""
    previous = state.scaled.get(key)
    shown = previous.current if previous is not None and not previous.written else current
    state.scaled[key] = Scaled(decision, shown, now)
    metrics.AUTOSCALER_EVALUATIONS.labels(*key[:2]).inc()
    state.wake.set()


async def run_autoscaler(state: State, tick: float = 1.0) -> None:
    """Every TICK, start the evaluation of each endpoint whose interval has passed, each
    on its own (EVALUATIONS at once, their queries on EVALUATIONS threads of their own): one
    endpoint with a slow Prometheus delays none of the others' next evaluation, and is not
    started again while its last one still runs."""
    limit = asyncio.Semaphore(EVALUATIONS)
    queries = ThreadPoolExecutor(EVALUATIONS, thread_name_prefix="prometheus")
    running: dict[tuple[str, str, str], asyncio.Task[None]] = {}

    async def one(key: tuple[str, str, str], ie: Obj, spec: InferenceEndpointSpec,
                  role: ServingRole, now: float) -> None:
        async with limit:
            try:
                await evaluate(state, ie, spec, role, now, queries)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("autoscaling %s/%s %s failed", *key)

    try:
        while True:
            for key, start in due_evaluations(state, time.time(), tick):
                if key not in running:
                    task = running[key] = asyncio.create_task(one(key, *start))
                    task.add_done_callback(functools.partial(_finished, running, key))
            await asyncio.sleep(tick)
    finally:
        for task in list(running.values()):
            task.cancel()
        queries.shutdown(wait=False, cancel_futures=True)


def _finished(running: dict[tuple[str, str, str], asyncio.Task[None]],
              key: tuple[str, str, str], _: asyncio.Task[None]) -> None:
    running.pop(key, None)


def due_evaluations(state: State, now: float, tick: float) -> list[tuple[
        tuple[str, str, str], tuple[Obj, InferenceEndpointSpec, ServingRole, float]]]:
    """The roles whose evaluation is due now (key, and evaluate's arguments)."""
    due = []
    for key, ie in list(state.endpoints.items()):
        spec = state.endpoint_view(ie).spec  # parsed once per version of the spec
        if spec is None:
            continue
        for role in spec.serving_roles():
            scaling, scale_key = role.scaling, (*key, role.name)
            if scaling is None:
                state.scaled.pop(scale_key, None)
                continue
            last = state.scaled.get(scale_key)
            # within half a tick of due counts as due: evaluations stay one interval
            # apart
            if last is None or now - last.at >= scaling.interval_seconds - tick / 2:
                due.append((scale_key, (ie, spec, role, now)))
    return due
