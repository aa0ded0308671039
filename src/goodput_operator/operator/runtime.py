"""The operator process around the controllers: the initial sync and the health endpoints.

The reconcile loop must not run on a half-filled cache: a node missing from it reads as "the
node left the group" and restarts a healthy gang. So before kopf starts its watches the
startup handler lists every object once (`prime`); the watches then only bring newer
versions. Readiness means "this process sees the cluster": primed, the API server answered
recently, and the loop (when this replica leads) finished a pass recently.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from goodput_operator import metrics, names
from goodput_operator.api.base import GROUP, VERSION, describe_errors
from goodput_operator.controllers.kube import Kube, Obj
from goodput_operator.controllers.shapes import Decode, decode_nodes, decode_pods
from goodput_operator.controllers.state import State
from goodput_operator.operator.access import AccessGate
from goodput_operator.operator.tokens import Refused
from goodput_operator.resources.inference import scrape_targets

log = logging.getLogger("goodput.runtime")
PAGE = 500  # objects per list request: bounded memory per response on large fleets
STOP_SECONDS = 10.0  # how long a shutdown waits for the loops to end
PODS = "/api/v1/pods"
NODES = "/api/v1/nodes"
GROUPS = f"/apis/{GROUP}/{VERSION}/ultraservergroups"


def _libc_trim() -> Callable[[int], object] | None:
    try:
        trim: Callable[[int], object] = ctypes.CDLL("libc.so.6").malloc_trim
        return trim
    except (OSError, AttributeError):  # not glibc: nothing to do
        return None


_TRIM = _libc_trim()


def time_collections() -> None:
    """Time every cyclic collection (goodput_gc_pause_seconds{generation}): a full one
    stops the report channel and the loop for as long as it walks the cache."""
    started: list[float] = []

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            metrics.GC_PAUSE_SECONDS.labels(str(info["generation"])).observe(
                time.perf_counter() - started.pop())

    gc.callbacks.append(timed)


def release_freed_memory(thorough: bool = False) -> None:
    """Hand freed heap back to the OS. After a burst (the initial listing of a 10k-pod
    cluster: the operator's list and kopf's, full bodies) glibc keeps the peak resident
    although the cache needs a third of it.

    What is alive then is frozen out of the collector (gc.freeze): a full collection walked
    the whole cache, 0.4 s with a 2,048-worker job, every 15 s under its reports, and each
    held every report and the loop. The cache is plain JSON (no cycles), freed by reference
    counts when replaced; THOROUGH (the caller's every tenth call) unfreezes first, so
    cyclic garbage that was alive at a freeze is still found."""
    if thorough:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
    if _TRIM is not None:
        _TRIM(0)


def freeze_survivors() -> None:
    """After every pass: the young generations collected (milliseconds) and what survives
    frozen, so a full collection the allocator triggers between passes (under a large job's
    reports) walks only what changed since the last pass, not the whole cache: 0.088 s at
    the median when frozen only at the minute's trim. Cycles that become garbage once
    frozen wait for the next thorough trim."""
    gc.collect(1)
    gc.freeze()


def tracked_pod(pod: Obj) -> bool:
    """Pods the operator keeps: ours, and any that request a device (they occupy nodes)."""
    labels = pod["metadata"].get("labels") or {}
    return names.JOB_LABEL in labels or names.ENDPOINT_LABEL in labels or any(
        "/" in resource for container in pod.get("spec", {}).get("containers") or []
        for resource in (container.get("resources") or {}).get("requests") or {})


def accept_group(state: State, body: Obj) -> None:
    """An UltraServerGroup the API server stored but our model refuses (a newer schema, a
    hand-edited object) is logged and skipped: one bad group must not stop the operator."""
    try:
        state.upsert_group(body)
    except ValidationError as err:
        log.error("UltraServerGroup %s is invalid and ignored: %s", body["metadata"]["name"],
                  describe_errors(err))


def pages(kube: Kube, path: str, listed: Obj | None = None,
          decode: Decode = json.loads) -> Iterator[list[Obj]]:
    """The objects at the API PATH (a list URL), one page at a time, as plain JSON dicts
    (or in the shape DECODE gives them): a caller that keeps only what it needs never holds
    the whole list at once. LISTED, when given, gets the list's resourceVersion (one
    consistent snapshot across the pages)."""
    token = ""
    while True:
        query: list[tuple[str, Any]] = [("limit", PAGE)] + ([("continue", token)] if token
                                                            else [])
        page = kube.get_json(path, query, decode)
        if listed is not None and "resourceVersion" not in listed:
            listed["resourceVersion"] = (page.get("metadata") or {}).get("resourceVersion", "")
        kind = page.get("kind", "List").removesuffix("List")
        items = page.get("items") or []
        for item in items:
            item.setdefault("kind", kind)
        yield items
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return


def _paths(plural: str, namespaces: list[str] | None) -> list[str]:
    base = f"/apis/{GROUP}/{VERSION}"
    if not namespaces:
        return [f"{base}/{plural}"]
    return [f"{base}/namespaces/{ns}/{plural}" for ns in namespaces]


async def prime(state: State, kube: Kube, namespaces: list[str] | None = None) -> None:
    """Fill STATE with every group, node, tracked pod, job and endpoint the operator
    watches, so that its first pass sees the whole cluster. Nodes and pods are decoded
    straight into the shapes the state keeps (controllers.shapes): at 45,000 pods, building
    every field of every pod was most of a restart."""
    started = mark = time.perf_counter()
    took: dict[str, float] = {}

    def lap(phase: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        took[phase], mark = now - mark, now

    async def each(path: str, listed: Obj | None = None,
                   decode: Decode = json.loads) -> AsyncIterator[Obj]:
        """The items at PATH; the next page is fetched while this one is stored."""
        listing = pages(kube, path, listed, decode)
        ahead = asyncio.ensure_future(asyncio.to_thread(next, listing, None))
        while (page := await ahead) is not None:
            ahead = asyncio.ensure_future(asyncio.to_thread(next, listing, None))
            for item in page:
                yield item

    groups: Obj = {}
    async for group in each(GROUPS, groups):
        accept_group(state, group)
    state.groups_version = groups.get("resourceVersion", "")
    nodes: Obj = {}
    async for node in each(NODES, nodes, decode_nodes):
        state.upsert_node(node)
    state.nodes_version = nodes.get("resourceVersion", "")
    lap("nodes")
    counts = {"pods": 0, "trainingjobs": 0, "inferenceendpoints": 0}
    listed: Obj = {}
    async for pod in each(PODS, listed, decode_pods):  # every namespace: usage is cluster-wide
        if tracked_pod(pod):
            state.upsert_pod(pod)
            counts["pods"] += 1
    lap("pods")
    for plural, upsert in (("trainingjobs", state.upsert_job),
                           ("inferenceendpoints", state.upsert_endpoint)):
        for path in _paths(plural, namespaces):
            async for obj in each(path):
                upsert(obj)
                counts[plural] += 1
    lap("jobs and endpoints")
    state.primed = True
    state.pods_version = listed.get("resourceVersion", "")
    log.info("initial sync: %d groups, %d nodes, %d pods, %d jobs, %d endpoints in %.1fs "
             "(%s)", len(state.groups), len(state.nodes), counts["pods"],
             counts["trainingjobs"], counts["inferenceendpoints"],
             time.perf_counter() - started,
             ", ".join(f"{phase} {seconds:.1f}s" for phase, seconds in took.items()))


async def cancelled(tasks: list[asyncio.Task[None]], seconds: float = STOP_SECONDS) -> None:
    """Cancel TASKS, again every half second until they end: on Python 3.11 one
    cancellation can be lost (`asyncio.wait_for` returns normally when cancelled just
    after its future finished; kopf's own stop repeats its cancellations too). After
    SECONDS the ones left are named in the log, and the shutdown goes on without them."""
    pending = {task for task in tasks if not task.done()}
    deadline = time.monotonic() + seconds
    while pending and time.monotonic() < deadline:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.5)
    if pending:
        log.error("%s did not stop within %.0fs", ", ".join(t.get_name() for t in pending),
                  seconds)


SD_SECONDS = 2.0  # how old /sd/serving's answer may be (Prometheus refreshes each 60 s)


@dataclass
class Health:
    """/healthz (liveness) and /readyz (readiness) on one port, and /sd/serving: where
    Prometheus finds the serving pods to scrape (http_sd_configs).

    Live: the loop is not wedged (a leading replica finished a pass in the last
    `stuck_seconds`). Ready: primed, the API server answered within `api_seconds`, and a
    leading replica's loop is live. A standby replica is ready once primed: it serves
    metrics and must not block a rolling update."""
    state: State
    kube: Kube
    leading: Callable[[], bool] = lambda: True
    api_seconds: float = 30.0
    stuck_seconds: float = 300.0
    _api_ok_at: float = 0.0
    _runner: web.AppRunner | None = field(default=None, repr=False)
    # /sd/serving's answer, when it was built and from which State.serving_version: built
    # again only when the serving pods changed, at most once per SD_SECONDS, whatever the
    # rate of GETs (at 80k pods a build takes about a second of the loop)
    _sd_body: bytes = field(default=b"", repr=False)
    _sd_at: float = field(default=-1e18, repr=False)
    _sd_version: int = field(default=-1, repr=False)
    # who may read /sd/serving (operator.access); None: anyone who reaches the port
    sd_gate: AccessGate | None = None

    def live(self, now: float) -> tuple[bool, str]:
        if self.leading() and self.state.primed and self.state.last_pass and \
                now - self.state.last_pass > self.stuck_seconds:
            return False, f"no reconcile pass for {now - self.state.last_pass:.0f}s"
        return True, "ok"

    async def ready(self, now: float) -> tuple[bool, str]:
        if not self.state.primed:
            return False, "initial sync not finished"
        if now - self._api_ok_at > self.api_seconds / 3:
            try:
                await asyncio.wait_for(asyncio.to_thread(self._ping), timeout=5)
                self._api_ok_at = now
            except Exception as err:  # any failure means "cannot see"
                log.warning("readiness: the API server did not answer: %s", err)
        if now - self._api_ok_at > self.api_seconds:
            return False, f"no answer from the API server for {now - self._api_ok_at:.0f}s"
        return self.live(now)

    def _ping(self) -> None:
        self.kube.get_json("/version")

    async def _healthz(self, _: web.Request) -> web.Response:
        ok, why = self.live(time.time())
        return web.json_response({"ok": ok, "reason": why}, status=200 if ok else 503)

    async def _readyz(self, _: web.Request) -> web.Response:
        ok, why = await self.ready(time.time())
        return web.json_response({"ok": ok, "reason": why, "leader": self.leading()},
                                 status=200 if ok else 503)

    async def _serving_targets(self, request: web.Request) -> web.Response:
        """Prometheus HTTP service discovery of the serving pods (docs/inference.md), from
        a cache at most SD_SECONDS old: a GET loop costs the decision loop nothing more.
        Only for a token allowed to get /sd/serving (SD_GATE), when there is a gate."""
        if self.sd_gate is not None:
            try:
                await self.sd_gate.check(request.headers.get("Authorization", ""),
                                         request.remote or "unknown")
            except Refused as err:
                return web.json_response({"error": str(err)}, status=err.status)
        now, version = time.monotonic(), self.state.serving_version
        if version != self._sd_version and now - self._sd_at >= SD_SECONDS:
            self._sd_body = json.dumps(scrape_targets(list(self.state.endpoints.values()),
                                                      self.state.endpoint_pods)).encode()
            self._sd_at, self._sd_version = now, version
        return web.Response(body=self._sd_body, content_type="application/json")

    async def start(self, port: int, host: str = "0.0.0.0",
                    tls: ssl.SSLContext | None = None) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/sd/serving", self._serving_targets)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port, ssl_context=tls).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self.sd_gate is not None:
            self.sd_gate.close()
