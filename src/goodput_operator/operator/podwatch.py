"""The operator's own pod watch: cluster-wide, whatever namespaces it manages, and slim.

Capacity is only right if every pod that holds accelerators on a group's nodes counts, in
any namespace, whoever made it (a namespaced operator, a user's plain pod, a Job, a
DaemonSet). So pods are watched cluster-wide, always, by this watch rather than kopf's:
it starts from the resourceVersion of the initial list (runtime.prime), so a start does not
list every pod a second time; each event is slimmed on arrival (only pods the operator
tracks are kept: its own, and any requesting a device); bookmarks keep its place; an expired
place (410 Gone) lists again and replaces what the state holds. Events are handed to the
event loop, where all state changes happen.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from goodput_operator import metrics
from goodput_operator.controllers.kube import Kube, Obj
from goodput_operator.controllers.state import State, pod_key, slim_pod
from goodput_operator.operator.runtime import PODS, tracked_pod, tracked_pods

log = logging.getLogger("goodput.podwatch")
WATCH_SECONDS = 240  # one watch request's length; the next continues from its place
BACKOFF = (0.5, 10.0)  # seconds after a failed request, doubling up to the second


class Expired(Exception):
    """The watch's place is older than the API server keeps (410 Gone): list again."""


class PodWatch:
    """A thread that follows pods from resourceVersion onward and hands each tracked pod's
    change to STATE on LOOP."""

    def __init__(self, state: State, kube: Kube, loop: asyncio.AbstractEventLoop) -> None:
        self.state, self.kube, self.loop = state, kube, loop
        self.resource_version = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, resource_version: str) -> None:
        self.resource_version = resource_version
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the current request (a daemon thread: it never holds up an exit)."""
        self._stop.set()

    def _run(self) -> None:
        delay = BACKOFF[0]
        while not self._stop.is_set():
            try:
                if not self.resource_version:
                    self.relist()
                self.follow()
                delay = BACKOFF[0]
            except Expired:
                log.info("pod watch expired at resourceVersion %s: listing again",
                         self.resource_version)
                self.resource_version = ""
            except Exception as err:  # the API server restarts, a network blip: go on
                log.warning("pod watch: %s; again in %.1fs", err, delay)
                metrics.WATCH_RESTARTS.labels("pods").inc()
                self._stop.wait(delay)
                delay = min(delay * 2, BACKOFF[1])

    def follow(self) -> None:
        """One watch request from the current place, each event handed to the state."""
        query: list[tuple[str, Any]] = [("resourceVersion", self.resource_version),
                                        ("allowWatchBookmarks", "true")]
        try:
            for event in self.kube.watch(PODS, query, WATCH_SECONDS):
                if self._stop.is_set():
                    return
                self.apply(event)
        except ApiException as err:
            if err.status == 410:
                raise Expired() from err
            raise

    def apply(self, event: Obj) -> None:
        """One watch event: the place moves on; a tracked pod's change goes to the state."""
        kind, body = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if body.get("code") == 410:
                raise Expired()
            raise RuntimeError(f"watch error: {body.get('message', body)}")
        version = (body.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = version
        if kind == "DELETED":
            self.loop.call_soon_threadsafe(self.state.remove_pod, slim_pod(body))
        elif kind in ("ADDED", "MODIFIED") and tracked_pod(body):
            self.loop.call_soon_threadsafe(self.state.upsert_pod, slim_pod(body))

    def relist(self) -> None:
        """List every pod again and make the state hold exactly the tracked ones: pods
        deleted while the watch was away are removed."""
        started = time.perf_counter()
        pods, version = tracked_pods(self.kube)
        done = asyncio.run_coroutine_threadsafe(_replace(self.state, pods), self.loop)
        done.result()
        self.resource_version = version
        log.info("pod watch: listed %d tracked pods again in %.1fs", len(pods),
                 time.perf_counter() - started)


async def _replace(state: State, pods: list[Obj]) -> None:
    listed = {pod_key(pod) for pod in pods}
    for key in [k for k in state.pods if k not in listed]:
        state.remove_pod(state.pods[key])
    for pod in pods:
        state.upsert_pod(pod)
