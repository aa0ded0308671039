"""The operator's own watches: pods cluster-wide, nodes, UltraServerGroups, and the
kubelets' node Leases.

Capacity is only right if every pod that holds accelerators on a group's nodes counts, in any
namespace, whoever made it (a namespaced operator, a user's plain pod, a Job, a DaemonSet).
So pods are watched cluster-wide, always, by a watch of the operator's own rather than
kopf's: it starts from the resourceVersion of the initial list (runtime.prime), so a start
does not list every pod a second time; each event is decoded straight into the shape the
state keeps (controllers.shapes: the rest of the JSON is skipped, never built), and only
pods the operator tracks are kept: its own, and any requesting a device. Nodes the same way,
each to what placement and health read (kopf would keep every full body, a real node's
image list included, queued per object after a restart).

A kubelet renews its node's Lease (kube-node-lease) every 10 s; a node whose renewals stop
is dead or cut off well before the node lifecycle controller says so (40-50 s by default),
so the Leases are followed too, keeping only each one's last renewal.

Groups are followed from the initial list too: a group deleted between that list and a
watch's start must not stay in the state.

Each: bookmarks keep the watch's place; an expired place (410 Gone) lists again and
replaces what the state holds. Events are handed to the event loop, where all state
changes happen.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from goodput_operator import metrics, times
from goodput_operator.controllers.kube import Kube, Obj
from goodput_operator.controllers.shapes import (
    Decode,
    decode_node_event,
    decode_nodes,
    decode_pod_event,
    decode_pods,
)
from goodput_operator.controllers.state import State, pod_key
from goodput_operator.decide.priority import (
    PRIORITY_CLASS,
    WORKLOAD_PRIORITY_CLASS,
    priority_class,
)
from goodput_operator.health.signals import device_taints
from goodput_operator.operator.runtime import (
    GROUPS,
    NODES,
    PODS,
    accept_group,
    pages,
    tracked_pod,
)
from goodput_operator.resources.workload import (
    RESOURCE_FLAVORS,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
)
from goodput_operator.topology.model import claim_use

log = logging.getLogger("goodput.watch")
NODE_LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
RESOURCE_SLICES = "/apis/resource.k8s.io/v1/resourceslices"
RESOURCE_CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
KUEUE_LOOK_SECONDS = 30.0  # how often a cluster without Kueue is looked at again
WATCH_SECONDS = 240  # one watch request's length; the next continues from its place
BACKOFF = (0.5, 10.0)  # seconds after a failed request, doubling up to the second


class Expired(Exception):
    """The watch's place is older than the API server keeps (410 Gone): list again."""


class Watch:
    """A thread that follows PATH from a resourceVersion onward and hands each change to
    the state on LOOP (subclasses say which objects, and how)."""

    path = ""
    kind = ""
    # how a list page and a watch event are decoded (shapes: only what the state keeps)
    decode_list: Decode = staticmethod(json.loads)
    decode_event: Decode = staticmethod(json.loads)

    def __init__(self, state: State, kube: Kube, loop: asyncio.AbstractEventLoop) -> None:
        self.state, self.kube, self.loop = state, kube, loop
        self.resource_version = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # set once the first list is in the state (KueueWatch: or Kueue found absent)
        self.settled = threading.Event()

    # ---- what a subclass says ------------------------------------------------------
    def changed(self, body: Obj) -> None:
        """An object was added or modified (called on the watch's thread)."""
        raise NotImplementedError

    def deleted(self, body: Obj) -> None:
        raise NotImplementedError

    def listed(self) -> tuple[list[Obj], str]:
        """Every object at PATH, and the list's resourceVersion."""
        version: Obj = {}
        items = [item for page in pages(self.kube, self.path, version, self.decode_list)
                 for item in page]
        return items, version.get("resourceVersion", "")

    async def replace(self, items: list[Obj]) -> None:
        """Make the state hold exactly ITEMS (on the loop)."""
        raise NotImplementedError

    # ---- the machinery -------------------------------------------------------------
    def start(self, resource_version: str = "") -> None:
        self.resource_version = resource_version
        self._thread = threading.Thread(target=self._run, name=f"{self.kind}-watch",
                                        daemon=True)
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
                log.info("%s watch expired at resourceVersion %s: listing again", self.kind,
                         self.resource_version)
                self.resource_version = ""
            except Exception as err:  # the API server restarts, a network blip: go on
                log.warning("%s watch: %s; again in %.1fs", self.kind, err, delay)
                metrics.WATCH_RESTARTS.labels(self.kind).inc()
                self._stop.wait(delay)
                delay = min(delay * 2, BACKOFF[1])

    def follow(self) -> None:
        """One watch request from the current place, each event handed to the state."""
        query: list[tuple[str, Any]] = [("resourceVersion", self.resource_version),
                                        ("allowWatchBookmarks", "true")]
        try:
            for event in self.kube.watch(self.path, query, WATCH_SECONDS, self.decode_event):
                if self._stop.is_set():
                    return
                self.apply(event)
        except ApiException as err:
            if err.status == 410:
                raise Expired() from err
            raise

    def apply(self, event: Obj) -> None:
        """One watch event: the place moves on; the object's change goes to the state."""
        kind, body = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if body.get("code") == 410:
                raise Expired()
            raise RuntimeError(f"watch error: {body.get('message', body)}")
        version = (body.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = version
        if kind == "DELETED":
            self.deleted(body)
        elif kind in ("ADDED", "MODIFIED"):
            self.changed(body)

    def relist(self) -> None:
        """List again and make the state hold exactly what is there: objects deleted while
        the watch was away are removed."""
        started = time.perf_counter()
        items, version = self.listed()
        asyncio.run_coroutine_threadsafe(self.replace(items), self.loop).result()
        self.resource_version = version
        self.settled.set()
        log.info("%s watch: listed %d again in %.1fs", self.kind, len(items),
                 time.perf_counter() - started)


class PodWatch(Watch):
    """Pods, cluster-wide: the tracked ones (the operator's, and any requesting a device)."""

    path, kind = PODS, "pods"
    decode_list, decode_event = staticmethod(decode_pods), staticmethod(decode_pod_event)

    def changed(self, body: Obj) -> None:
        if tracked_pod(body):
            self.loop.call_soon_threadsafe(self.state.upsert_pod, body)

    def deleted(self, body: Obj) -> None:
        self.loop.call_soon_threadsafe(self.state.remove_pod, body)

    def listed(self) -> tuple[list[Obj], str]:
        pods, version = super().listed()
        return [pod for pod in pods if tracked_pod(pod)], version

    async def replace(self, items: list[Obj]) -> None:
        listed = {pod_key(pod) for pod in items}
        for key in [k for k in self.state.pods if k not in listed]:
            self.state.remove_pod(self.state.pods[key])
        for pod in items:
            self.state.upsert_pod(pod)


class NodeWatch(Watch):
    """Nodes, decoded to what the state keeps (State.upsert_node stores them; heartbeats
    wake nothing)."""

    path, kind = NODES, "nodes"
    decode_list, decode_event = staticmethod(decode_nodes), staticmethod(decode_node_event)

    def changed(self, body: Obj) -> None:
        self.loop.call_soon_threadsafe(self.state.upsert_node, body)

    def deleted(self, body: Obj) -> None:
        self.loop.call_soon_threadsafe(self.state.remove_node, body["metadata"]["name"])

    async def replace(self, items: list[Obj]) -> None:
        names = {node["metadata"]["name"] for node in items}
        for name in [n for n in self.state.nodes if n not in names]:
            self.state.remove_node(name)
        for node in items:
            self.state.upsert_node(node)


class GroupWatch(Watch):
    """UltraServerGroups, from where the initial list left off: a group deleted between
    that list and a watch's start would otherwise stay in the state for ever, keeping
    its nodes from every later group."""

    path, kind = GROUPS, "ultraservergroups"

    def changed(self, body: Obj) -> None:
        self.loop.call_soon_threadsafe(accept_group, self.state, body)

    def deleted(self, body: Obj) -> None:
        self.loop.call_soon_threadsafe(self.state.remove_group, body["metadata"]["name"])

    async def replace(self, items: list[Obj]) -> None:
        names = {group["metadata"]["name"] for group in items}
        for name in [n for n in self.state.groups if n not in names]:
            self.state.remove_group(name)
        for group in items:
            accept_group(self.state, group)


def renewal(lease: Obj) -> tuple[str, float] | None:
    """(node, when its kubelet last renewed its Lease), or None for a Lease without one."""
    renewed = times.parse((lease.get("spec") or {}).get("renewTime"))
    name = (lease.get("metadata") or {}).get("name")
    return (name, renewed) if name and renewed is not None else None


class LeaseWatch(Watch):
    """The kubelets' node Leases: each node's last renewal (State.renew_lease)."""

    path, kind = NODE_LEASES, "leases"

    def changed(self, body: Obj) -> None:
        found = renewal(body)
        if found is not None:
            self.loop.call_soon_threadsafe(self.state.renew_lease, *found)

    def deleted(self, body: Obj) -> None:
        name = (body.get("metadata") or {}).get("name")
        if name:
            self.loop.call_soon_threadsafe(self.state.forget_lease, name)

    async def replace(self, items: list[Obj]) -> None:
        found = dict(r for lease in items if (r := renewal(lease)) is not None)
        for name in [n for n in self.state.leases if n not in found]:
            self.state.forget_lease(name)
        for name, renewed in found.items():
            self.state.renew_lease(name, renewed)


class DraWatch(Watch):
    """A resource.k8s.io/v1 kind: a cluster without it (before Kubernetes 1.34) is left
    alone, said once."""

    def _run(self) -> None:
        try:
            self.kube.get_json(self.path, [("limit", 1)])
        except ApiException as err:
            if err.status == 404:
                log.info("no resource.k8s.io/v1 %s here: not watched", self.kind)
                return
        super()._run()


class ClaimWatch(DraWatch):
    """DRA ResourceClaims, cluster-wide: what each allocated one holds (State.upsert_claim),
    so that devices other tenants claim count against the nodes."""

    path, kind = RESOURCE_CLAIMS, "resourceclaims"

    def changed(self, body: Obj) -> None:
        self.loop.call_soon_threadsafe(self.state.upsert_claim, _key(body), claim_use(body))

    def deleted(self, body: Obj) -> None:
        self.loop.call_soon_threadsafe(self.state.upsert_claim, _key(body), None)

    async def replace(self, items: list[Obj]) -> None:
        listed = {_key(item) for item in items}
        for key in [k for k in self.state.claims if k not in listed]:
            self.state.upsert_claim(key, None)
        for item in items:
            self.state.upsert_claim(_key(item), claim_use(item))


def _key(body: Obj) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"


class SliceWatch(DraWatch):
    """DRA ResourceSlices, cluster-wide: only which devices are tainted, per node
    (State.slice_taints)."""

    path, kind = RESOURCE_SLICES, "resourceslices"

    def changed(self, body: Obj) -> None:
        node, taints = device_taints(body)
        self.loop.call_soon_threadsafe(self.state.slice_taints, body["metadata"]["name"],
                                       node, taints)

    def deleted(self, body: Obj) -> None:
        self.loop.call_soon_threadsafe(self.state.slice_taints, body["metadata"]["name"],
                                       None, [])

    async def replace(self, items: list[Obj]) -> None:
        listed = {item["metadata"]["name"] for item in items}
        for name in [n for n in self.state.tainted_slices() if n not in listed]:
            self.state.slice_taints(name, None, [])
        for item in items:
            self.state.slice_taints(item["metadata"]["name"], *device_taints(item))



class KueueWatch(Watch):
    """A Kueue kind: a cluster without Kueue is looked at again every KUEUE_LOOK_SECONDS
    (Kueue may be installed after the operator); State.kueue says whether it is there.
    `settled` is set once the first look is over (listed, or found absent): the first pass
    waits for it, so that a queued job is not first decided without its Workload."""

    def _run(self) -> None:
        said = False
        while not self._stop.is_set():
            try:
                self.kube.get_json(self.path, [("limit", 1)])
                break
            except ApiException as err:
                if err.status != 404:
                    break  # anything else is the watch's to retry
                if not said:
                    log.info("no Kueue here (%s): looked at again every %.0fs", self.path,
                             KUEUE_LOOK_SECONDS)
                    said = True
                self.loop.call_soon_threadsafe(self.state.serve_kueue, False)
                self.settled.set()
                self._stop.wait(KUEUE_LOOK_SECONDS)
            except Exception as err:  # the API server restarts: the watch retries
                log.warning("%s: %s", self.kind, err)
                break
        super()._run()



def slim_workload(body: Obj) -> Obj:
    """What decide.quota reads of a Workload: who owns it and what its pod sets count
    (resources.workload.not_owned, pod_counts), never the pod templates."""
    meta = body.get("metadata") or {}
    kept = ("name", "namespace", "uid", "resourceVersion", "generation", "labels")
    status = body.get("status") or {}
    owners = [{k: r.get(k) for k in ("kind", "name", "uid", "controller")}
              for r in meta.get("ownerReferences") or [] if isinstance(r, dict)]
    pod_sets = [{"name": s.get("name"), "count": s.get("count")}
                for s in (body.get("spec") or {}).get("podSets") or [] if isinstance(s, dict)]
    return {"apiVersion": body.get("apiVersion"),
            "metadata": {**{k: meta[k] for k in kept if k in meta}, "ownerReferences": owners},
            "spec": {"podSets": pod_sets},
            "status": {k: status[k] for k in ("conditions", "admission", "clusterName",
                                              "admissionChecks", "nominatedClusterNames")
                       if k in status}}


class WorkloadWatch(KueueWatch):
    """Kueue Workloads, cluster-wide (State.upsert_workload)."""

    path, kind = WORKLOADS, "workloads"

    def changed(self, body: Obj) -> None:
        self.loop.call_soon_threadsafe(self.state.serve_kueue, True)
        self.loop.call_soon_threadsafe(self.state.upsert_workload, slim_workload(body))

    def deleted(self, body: Obj) -> None:
        meta = body.get("metadata") or {}
        self.loop.call_soon_threadsafe(self.state.remove_workload, meta.get("namespace", ""),
                                       meta.get("name", ""))

    async def replace(self, items: list[Obj]) -> None:
        self.state.serve_kueue(True)
        listed = {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items}
        for key in [k for k in self.state.workloads if k not in listed]:
            self.state.remove_workload(*key)
        for item in items:
            self.state.upsert_workload(slim_workload(item))


class FlavorWatch(KueueWatch):
    """Kueue ResourceFlavors: each one's node labels (where its quota's nodes are)."""

    path, kind = RESOURCE_FLAVORS, "resourceflavors"

    def changed(self, body: Obj) -> None:
        labels = dict(((body.get("spec") or {}).get("nodeLabels")) or {})
        self.loop.call_soon_threadsafe(self.state.upsert_flavor, body["metadata"]["name"],
                                       labels)

    def deleted(self, body: Obj) -> None:
        self.loop.call_soon_threadsafe(self.state.upsert_flavor, body["metadata"]["name"],
                                       None)

    async def replace(self, items: list[Obj]) -> None:
        listed = {item["metadata"]["name"] for item in items}
        for name in [n for n in self.state.flavors if n not in listed]:
            self.state.upsert_flavor(name, None)
        for item in items:
            self.state.upsert_flavor(item["metadata"]["name"],
                                     dict((item.get("spec") or {}).get("nodeLabels") or {}))


class _ClassWatch(Watch):
    """A watch of priority classes of one SOURCE (decide.priority): each one's view."""

    source = ""

    def changed(self, body: Obj) -> None:
        self.loop.call_soon_threadsafe(self.state.upsert_priority_class, self.source,
                                       body["metadata"]["name"],
                                       priority_class(body, self.source))

    def deleted(self, body: Obj) -> None:
        self.loop.call_soon_threadsafe(self.state.upsert_priority_class, self.source,
                                       body["metadata"]["name"], None)

    async def replace(self, items: list[Obj]) -> None:
        listed = {item["metadata"]["name"] for item in items}
        for name in [n for n in self.state.priority_classes[self.source] if n not in listed]:
            self.state.upsert_priority_class(self.source, name, None)
        for item in items:
            self.state.upsert_priority_class(self.source, item["metadata"]["name"],
                                             priority_class(item, self.source))


class PriorityClassWatch(_ClassWatch):
    """Kubernetes PriorityClasses: the admin's job priorities (and the pods')."""

    path, kind, source = PRIORITY_CLASSES, "priorityclasses", PRIORITY_CLASS


class WorkloadPriorityClassWatch(_ClassWatch, KueueWatch):
    """Kueue WorkloadPriorityClasses: job priorities that leave the pods' alone."""

    path, kind = WORKLOAD_PRIORITY_CLASSES, "workloadpriorityclasses"
    source = WORKLOAD_PRIORITY_CLASS
