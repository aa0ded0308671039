"""The operator's one ordered loop: kopf's watch handlers only update `State` and wake it;
every pass decides groups, then jobs, then endpoints (goodput_operator.decide) and applies
each kind's plan before the next kind is decided.

A pass runs whenever anything changed, when a timer (grace period, backoff) runs out, and
every resync_seconds. Bulk work is spread over passes by the write budget, so a node
failure never waits behind thousands of pod writes; and it does not wait for the pass that
is writing them either: while the endpoints' writes of a rollout are applied (most of a
busy pass), an urgent change (State.urgent: a node's health, a worker's end, a job created
or deleted, evidence from reports) or a timer running out has the groups and jobs decided
and applied again at once, in the same order, on a fresh snapshot that holds the
endpoints' reservations (`_lanes`).
"""

from __future__ import annotations

import asyncio
import logging
import time

from goodput_operator import metrics
from goodput_operator.api.trainingjob import PHASES
from goodput_operator.controllers import inferenceendpoint, trainingjob, ultraservergroup
from goodput_operator.controllers.kube import Kube
from goodput_operator.controllers.state import PASS_WRITE_BUDGET, State
from goodput_operator.operator import runtime

log = logging.getLogger("goodput.loop")
DEBOUNCE_SECONDS = 0.02  # one pass for a burst of events, not one per event
TRIM_SECONDS = 60.0  # how often freed memory goes back to the OS
THOROUGH_TRIMS = 10  # every tenth trim, a full collection of everything (runtime)
SLOW_PASS_SECONDS = 1.0  # a pass longer than this is logged with where its time went
TIMER_CHECK_SECONDS = 0.1  # how often a pass busy with endpoints' writes looks at timers


async def run_loop(state: State, kube: Kube, resync_seconds: float = 5.0) -> None:
    trimmed = time.time()  # the first trim a minute in: after the initial listings
    trims = 0
    while True:
        timeout = resync_seconds
        if state.deadline is not None:
            timeout = min(timeout, max(0.0, state.deadline - time.time()))
        await woken_or(state, timeout)
        await asyncio.sleep(DEBOUNCE_SECONDS)  # let a burst of watch events land first
        await one_pass(state, kube)
        runtime.freeze_survivors()
        if state.last_pass - trimmed > TRIM_SECONDS:
            trimmed, trims = state.last_pass, trims + 1
            runtime.release_freed_memory(thorough=trims % THOROUGH_TRIMS == 0)


async def woken_or(state: State, timeout: float) -> None:
    """Until something wakes the loop, or TIMEOUT seconds. Not `asyncio.wait_for`: on
    Python 3.11 it returns normally when it is cancelled in the few steps after the awaited
    future finished, and at scale the wake is set again by the end of nearly every pass, so
    a shutdown's cancellation was lost and the operator never stopped (bench/HISTORY.md,
    attempt 10)."""
    woken = asyncio.ensure_future(state.wake.wait())
    try:
        await asyncio.wait({woken}, timeout=timeout)
    finally:
        woken.cancel()


async def one_pass(state: State, kube: Kube) -> None:
    state.wake.clear()
    state.deadline = None
    state.write_budget, state.deferred_writes = PASS_WRITE_BUDGET, 0
    state.fits.clear()
    state.urgent.clear()
    started = time.perf_counter()
    grouped, jobs = await groups_then_jobs(state, kube)
    applied = time.perf_counter()
    endpoints = asyncio.create_task(
        inferenceendpoint.reconcile_endpoints(state, kube, time.time()))
    try:
        lanes = await _lanes(state, kube, endpoints)
    finally:
        endpoints.cancel()  # done already, unless the loop itself is being stopped
    ended = time.perf_counter()
    metrics.RECONCILE_SECONDS.observe(ended - started)
    state.last_pass = time.time()
    if ended - started > SLOW_PASS_SECONDS:
        log.info("slow pass %.2fs: groups %.2fs, %d jobs %.2fs, %d endpoints %.2fs "
                 "(%d pod writes left for the next pass; groups and jobs again %d time(s) "
                 "meanwhile)", ended - started, grouped - started, jobs, applied - grouped,
                 len(state.endpoints), ended - applied, state.deferred_writes, lanes)
    phases = {phase: 0 for phase in PHASES}
    for job in state.jobs.values():
        phase = (job.get("status") or {}).get("phase")
        if phase in phases:
            phases[phase] += 1
    for phase, count in phases.items():
        metrics.JOBS.labels(phase).set(count)
    for group, fleet in state.fleets.items():
        metrics.ACCELERATORS.labels(group).set(sum(n.used for n in fleet.nodes.values()))


async def groups_then_jobs(state: State, kube: Kube) -> tuple[float, int]:
    """The groups decided and their nodes' changes applied, then the jobs decided and
    applied, while the groups' status writes (started) are still on their way: a
    quarantined node's job is re-placed without waiting for them. Returns when the groups'
    stage ended (perf_counter) and how many jobs there were."""
    status_writes = await ultraservergroup.reconcile_groups(state, kube, time.time())
    grouped = time.perf_counter()
    try:
        return grouped, await trainingjob.reconcile_jobs(state, kube, time.time())
    finally:
        await status_writes  # within the pass: the next pass never writes a group twice


async def _lanes(state: State, kube: Kube, endpoints: asyncio.Task[None]) -> int:
    """While ENDPOINTS (the pass's endpoint stage) runs: each time something urgent
    arrives or a timer runs out, decide and apply the groups and then the jobs again (a
    failed node is quarantined and its job placed anew without waiting for the endpoints'
    writes, which start no new pod write meanwhile). The endpoints' reservations are
    already in the state, so the jobs see what is left; the endpoints see the jobs' new
    placements in the next pass, as they would have. Returns how many times the groups
    and jobs ran."""
    lanes, handled = 0, None  # the timer a lane ran for: it stays for the next pass
    while not endpoints.done():
        urgent = asyncio.ensure_future(state.urgent.wait())
        done, _ = await asyncio.wait({endpoints, urgent}, timeout=TIMER_CHECK_SECONDS,
                                     return_when=asyncio.FIRST_COMPLETED)
        urgent.cancel()
        if endpoints in done:
            break
        if urgent not in done:  # a timer set meanwhile (any decision may set one)
            due = state.deadline
            if due is None or due > time.time() or due == handled:
                continue
            handled = due  # an endpoint's timer, too, is still the next pass's
        state.urgent.clear()
        await asyncio.sleep(DEBOUNCE_SECONDS)
        state.fits.clear()  # a node's taints may have changed who fits where
        started = time.perf_counter()
        state.bulk_open.clear()  # the endpoints' writes wait: the API is this lane's first
        try:
            await groups_then_jobs(state, kube)
        finally:
            state.bulk_open.set()
        metrics.URGENT_SECONDS.observe(time.perf_counter() - started)
        lanes += 1
    await endpoints  # its errors, as before
    return lanes
