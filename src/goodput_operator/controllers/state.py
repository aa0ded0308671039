"""What the operator knows, fed by watch events: nodes, accelerator pods, groups, jobs,
and one fleet model per UltraServerGroup kept current incrementally.

All mutation happens on the event loop thread (the kopf handlers are async), so the
reconcile loop and the handlers never race.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from goodput_operator import metrics, names
from goodput_operator.api.inferenceendpoint import ROLE_NAMES
from goodput_operator.api.statuses import ProgressDict
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.api.ultraservergroup import OWN_LABELS, UltraServerGroupSpec
from goodput_operator.api.views import (
    EndpointView,
    JobView,
    endpoint_view,
    endpoint_views,
    job_view,
    job_views,
    key_of,
)
from goodput_operator.autoscaling.routing import ProxyView
from goodput_operator.controllers.kube import BULK_WRITES, wrote
from goodput_operator.controllers.pacing import WriteLimit
from goodput_operator.controllers.shapes import NODE_METADATA_KEPT, POD_SPEC_KEPT
from goodput_operator.decide.priority import (
    PRIORITY_CLASS,
    WORKLOAD_PRIORITY_CLASS,
    Classes,
    Priority,
    PriorityClass,
    in_order,
    of_job,
)
from goodput_operator.decide.snapshot import Key, Scaled, Snapshot
from goodput_operator.decide.turns import TurnKey
from goodput_operator.decide.types import Memo, OwnerKey, Refusal, Reservation
from goodput_operator.health import accounting, badput
from goodput_operator.health.hang import StepClock
from goodput_operator.health.probing import Inconclusive
from goodput_operator.health.quarantine import Finding, Renewal
from goodput_operator.health.sdc import Ledger
from goodput_operator.health.signals import DeviceTaint
from goodput_operator.health.straggler import Pace, Straggler
from goodput_operator.resources.claims import CLAIM
from goodput_operator.resources.pods import FINISHED, controller_of
from goodput_operator.resources.workload import MULTIKUEUE
from goodput_operator.topology.bookings import Booking, booking
from goodput_operator.topology.model import (
    ClaimUse,
    Fleet,
    GroupShape,
    endpoint_owner,
    trainingjob_owner,
)

Obj = dict[str, Any]
log = logging.getLogger("goodput.state")


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def pod_key(pod: Obj) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace', 'default')}/{meta['name']}"


# the labels the operator writes on members for kubectl and other tools (decide.group
# _labels), which no decision reads: their echoes change nothing the fleet reads. Counted,
# a fleet's first labelling (20,000 nodes) woke the groups' and jobs' urgent lane with
# every write, and the endpoints' pod writes, which wait while it runs, nearly stopped.
OWN_NODE_LABELS = frozenset(OWN_LABELS)


def node_digest(node: Obj) -> tuple[object, ...]:
    """What placement reads from a node: labels (not OWN_NODE_LABELS), allocatable, taints,
    schedulability and the status of each condition (not their heartbeat times)."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    conditions = tuple(sorted((c.get("type"), c.get("status"))
                              for c in status.get("conditions") or []))
    taints = tuple(sorted((t.get("key"), t.get("value"), t.get("effect"))
                          for t in spec.get("taints") or []))
    labels = node["metadata"].get("labels") or {}
    return (tuple(sorted((k, v) for k, v in labels.items() if k not in OWN_NODE_LABELS)),
            tuple(sorted((status.get("allocatable") or {}).items())), taints,
            bool(spec.get("unschedulable")), conditions)


def _older(incoming: Obj, held: Obj | None) -> bool:
    """Whether INCOMING is an older version of HELD: a watch event still on its way when
    our own status write (held, with the version that write returned) landed must not
    undo it in the cache. resourceVersions are comparable integers (KEP-5504, stable
    since Kubernetes 1.35); anything else is taken as newer."""
    if held is None:
        return False
    try:
        return int(incoming["metadata"]["resourceVersion"]) < int(
            held["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return False


def _echo(incoming: Obj, held: Obj | None) -> bool:
    """Whether INCOMING is the version HELD already is: the watch's echo of a write the
    operator made (a pass's, or the report channel's: one per step of a large gang)
    brings nothing new. Waking a pass for it made each pass's progress write wake the
    next pass, back to back while workers report; a pass that changed more than the
    progress asks for the next one itself (controllers.trainingjob.apply_job)."""
    version = (incoming.get("metadata") or {}).get("resourceVersion")
    return bool(version) and held is not None and \
        (held.get("metadata") or {}).get("resourceVersion") == version


T = TypeVar("T")
STANDBY_PER_NAMESPACE = 8  # standby domains one namespace's endpoints may hold
SEARCHES_PER_NAMESPACE = 32  # placement searches a pass runs for one namespace's waiters
PASS_WRITE_BUDGET = 256  # label and pod writes per pass: a second or two of API work
WORKLOAD_RETRY_TIMES = 8  # a refused Workload is tried again at most 2**8 s after the last


def slim(body: Obj) -> Obj:
    """BODY without what the operator never reads and every object carries: managedFields
    (often the biggest part of a pod; a third of the cache on a 10k-pod fleet)."""
    body.get("metadata", {}).pop("managedFields", None)
    return body


def slim_pod(body: Obj) -> Obj:
    """A pod as the operator keeps it: metadata, status, and of its spec only what
    placement and accounting read (node, gates, affinity, each container's resources).
    Env, volumes, args and probes are most of a worker's bytes and never read back."""
    spec = body.get("spec") or {}
    kept = {k: spec[k] for k in POD_SPEC_KEPT if k in spec}
    kept["containers"] = [{"name": c.get("name"), "resources": c.get("resources") or {}}
                          for c in spec.get("containers") or []]
    return {**slim(body), "spec": kept}


def slim_node(body: Obj) -> Obj:
    """A node as the operator keeps it: labels, annotations, taints, schedulability,
    allocatable, capacity and conditions (the Ready heartbeat is read: health.quarantine).
    A real node's image list, addresses and system info are most of its bytes and never
    read."""
    meta, spec, status = (body.get(k) or {} for k in ("metadata", "spec", "status"))
    return {
        "apiVersion": "v1", "kind": "Node",  # events name the node (Kube.event)
        "metadata": {k: meta[k] for k in NODE_METADATA_KEPT if k in meta},
        "spec": {k: spec[k] for k in ("taints", "unschedulable") if k in spec},
        "status": {k: status[k] for k in ("allocatable", "capacity", "conditions")
                   if k in status},
    }


def ending(pod: Obj) -> bool:
    """A pod that has finished or is being deleted: a worker's end is news to its job."""
    return bool(pod["metadata"].get("deletionTimestamp")) or \
        (pod.get("status") or {}).get("phase") in FINISHED


def without_our_annotations(pod: Obj) -> Obj:
    """POD without `goodput.dev/` annotations (a copy, when it had any)."""
    notes = pod["metadata"].get("annotations") or {}
    if not any(k.startswith(f"{names.PREFIX}/") for k in notes):
        return pod
    kept = {k: v for k, v in notes.items() if not k.startswith(f"{names.PREFIX}/")}
    return {**pod, "metadata": {**pod["metadata"], "annotations": kept}}


def booked(pod: Obj, where: Booking) -> Obj:
    """POD as the fleet counts it: on the node WHERE books (topology.bookings), if any."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or where.node is None:
        return pod
    return {**pod, "spec": {**spec, "nodeName": where.node}}


@dataclass
class Settings:
    """What the operator is told at its start (its flags: operator.flags), and nothing
    else: the one part of the state no event changes."""

    report_url: str = ""  # where workers send reports (given to their pods)
    report_ca: str = ""  # the PEM bundle workers check an https report_url against
    probe_namespace: str = "goodput-system"  # where probe Jobs run
    probe_image: str = ""  # the image probe Jobs run (the operator's own)
    standby_per_namespace: int = STANDBY_PER_NAMESPACE  # --standby-domains-per-namespace
    searches_per_namespace: int = SEARCHES_PER_NAMESPACE  # --searches-per-namespace
    cluster_name: str = ""  # --cluster-name: written into job statuses
    require_queue: frozenset[str] = frozenset()  # --require-queue: namespaces
    prometheus_url: str = "http://127.0.0.1:9090"
    prometheus_allow: list[str] = field(default_factory=list)  # what else endpoints may
    # name (URL prefixes)
    haproxy_runtime_api: str = ""  # --haproxy-runtime-api: where requests are routed


class State:
    """What the operator knows between passes: the cache of what the watches heard
    (nodes, pods, groups, jobs, endpoints, Kueue's objects, the fleets built from them),
    what the report channel and the pass remember (health seen, blame, progress, paces,
    refusals, turns, the autoscaler's decisions), what controls the pass (wake-ups, the
    write budget and bulk writes), and the operator's `settings`."""

    def __init__(self) -> None:
        self.settings = Settings()
        self.proxy: ProxyView | None = None  # the routing proxy, as last read (routing)
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[str, Obj] = {}  # pods that request accelerators or are ours
        self.job_pods: dict[tuple[str, str], dict[str, Obj]] = defaultdict(dict)
        self.groups: dict[str, UltraServerGroupSpec] = {}
        self.group_objects: dict[str, Obj] = {}
        self.fleets: dict[str, Fleet] = {}
        self.jobs: dict[tuple[str, str], Obj] = {}
        self.wake = asyncio.Event()
        # a change the groups' and jobs' decisions must see now (a node's health, a job's
        # worker ending, a job created or deleted): acted on even while a pass is still
        # applying the endpoints' writes of a rollout (operator.loop)
        self.urgent = asyncio.Event()
        # the endpoints' bulk writes: at most BULK_WRITES at once, fewer while the API
        # server is slow (controllers.pacing), and none started while groups and jobs are
        # applied again for an urgent change (`bulk`)
        self.bulk_open = asyncio.Event()
        self.bulk_open.set()
        self.bulk_limit = WriteLimit(BULK_WRITES)
        self._bulk_slots = asyncio.Condition()
        # their own threads: a lane's calls never queue behind them in the operator
        self._bulk_threads = ThreadPoolExecutor(BULK_WRITES, thread_name_prefix="bulk")
        self.primed = False  # the initial list of every watched kind has landed
        self.pods_version = ""  # the initial pod list's resourceVersion (the pod watch's start)
        self.groups_version = ""  # the same for UltraServerGroups
        self.nodes_version = ""  # and for nodes
        self.last_pass = 0.0  # when the reconcile loop last finished a pass (liveness)
        self.write_budget = PASS_WRITE_BUDGET  # endpoints' pod writes left this pass
        self.searched: dict[TurnKey, float] = {}  # when each object last had a turn
        # the members' goodput.dev labels (ultraservergroup.label_nodes): asked for, being
        # written, and the tasks writing them
        self.labels_wanted: dict[str, dict[str, str]] = {}
        self.labels_writing: set[str] = set()
        self.labelers: set[asyncio.Future[None]] = set()
        self.deferred_writes = 0  # writes pushed to the next pass (logged)
        self.deadline: float | None = None  # earliest timer (grace, backoff) of this pass
        # node health as the operator saw it change (health/quarantine.observe)
        self.seen_unhealthy: dict[str, float] = {}
        self.noticed: dict[str, float] = {}  # node -> when its notice was first seen
        self.healthy_since: dict[str, float] = {}
        self.blamed: dict[str, Finding] = {}  # nodes reports blamed (SDC votes, bad probes)
        self.progress: dict[tuple[str, str], ProgressDict] = {}  # latest step report per job
        self.steps: dict[tuple[str, str], StepClock] = {}  # newest step per job (hangs)
        self.paces: dict[tuple[str, str], Pace] = {}  # each rank's pace per job (stragglers)
        self.stragglers: dict[tuple[str, str], list[Straggler]] = {}  # the latest verdict
        self.paces_judged: dict[tuple[str, str], float] = {}  # when, per job
        self.leases: dict[str, float] = {}  # node -> its kubelet's last Lease renewal
        self.renewing: dict[str, Renewal] = {}  # nodes whose Leases were seen renewed
        self._intervals: dict[str, deque[float]] = {}  # node -> its recent renewal intervals
        # the ResourceSlices with tainted devices: slice -> (node, taints); and per node
        self._slice_taints: dict[str, tuple[str, list[DeviceTaint]]] = {}
        self.device_taints: dict[str, list[DeviceTaint]] = {}
        # allocated DRA claims (claim_use), and which claims each pod holds: a claim counts
        # on its node unless its pod is one the fleet already counts (ours, annotated)
        self.claims: dict[str, ClaimUse] = {}
        self._claims_of_pod: dict[str, set[str]] = {}
        self.refused: dict[tuple[str, str], Refusal] = {}  # workloads whose creates fail
        self.ledgers: dict[tuple[str, str], Ledger] = {}  # SDC votes per job
        # each job's and endpoint's view (api.views: its spec parsed once per version),
        # refreshed as each snapshot is taken; the report channel reads the jobs' on every
        # report (thousands a second), the autoscaler the endpoints' every second
        self.job_views: dict[tuple[str, str], JobView] = {}
        self.endpoint_views: dict[tuple[str, str], EndpointView] = {}
        self.probed: set[str] = set()  # uids of probe pods that reported
        self.probe_runs: dict[str, int] = {}  # node -> probe results received
        self.clean_probes: dict[str, int] = {}  # node -> clean results in a row
        self.probed_at: dict[str, float] = {}  # node -> its last clean probe
        self.inconclusive: dict[str, Inconclusive] = {}  # node -> its last run proved nothing
        self.last_sweep: dict[str, float] = {}  # group -> last scheduled probe sweep
        self.group_written: dict[str, float] = {}  # group -> last status write
        self.accounts: dict[str, accounting.Ledger] = {}  # group -> its accounting
        self.accounted: dict[str, accounting.Seen] = {}  # job uid -> as its accounting saw it
        self.endpoints: dict[tuple[str, str], Obj] = {}
        # Kueue (decide.quota): Workloads, ResourceFlavors' node labels, whether served
        self.workloads: dict[tuple[str, str], Obj] = {}
        self.flavors: dict[str, dict[str, str]] = {}
        # the admin's priority classes by source (decide.priority), name -> class
        self.priority_classes: dict[str, dict[str, PriorityClass]] = {
            PRIORITY_CLASS: {}, WORKLOAD_PRIORITY_CLASS: {}}
        self.kueue = False
        # owner (kind, namespace, name) -> (its Workload, the API server's refusal of it)
        self.workload_refusals: dict[OwnerKey, tuple[str, Refusal]] = {}
        self.delegated: dict[tuple[str, str], Obj] = {}  # jobs MultiKueue runs elsewhere
        self.delegated_endpoints: dict[tuple[str, str], Obj] = {}  # and endpoints
        # foreign pods that book nothing (topology.bookings): key -> (node, why), and the
        # pinned foreign pods that book until a time
        self.ignored_pods: dict[str, tuple[str, str]] = {}
        self.booking_until: dict[str, float] = {}
        self.serving_version = 0  # bumped when an endpoint or its pods change (/sd/serving)
        self.endpoint_pods: dict[tuple[str, str], dict[str, Obj]] = defaultdict(dict)
        # the autoscaler's latest decision and its history (autoscaling.History), per
        # endpoint and role: (namespace, name, role or "")
        self.scaled: dict[tuple[str, str, str], Scaled] = {}
        self.scaling_history: dict[tuple[str, str, str], Any] = {}
        # which nodes each pod spec fits, by group and spec (decide.fit): one pass's answers,
        # shared with the autoscaler; emptied as each pass starts (the nodes may change)
        self.fits = Memo()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    def snapshot(self, clock: float, with_members: bool = False) -> Snapshot:
        """What the decisions read (decide.Snapshot): views of these caches, not copies
        (but for the small books the report thread writes).
        WITH_MEMBERS: each group's nodes and overlaps (a scan of every node; the group pass
        needs it)."""
        self.expire_bookings(clock)
        members, overlaps = self.membership() if with_members else ({}, {})
        classes = self.classes()
        priorities = {key: of_job(job, classes) for key, job in self.jobs.items()}
        for fleet in self.fleets.values():
            fleet.set_clock(clock)  # incident scores decayed to the pass's clock
        self.job_views = job_views([*self.jobs.values(), *self.delegated.values()],
                                   self.job_views)
        self.endpoint_views = endpoint_views(
            [*self.endpoints.values(), *self.delegated_endpoints.values()],
            self.endpoint_views)
        return Snapshot(
            job_views=self.job_views, endpoint_views=self.endpoint_views,
            clock=clock, nodes=self.nodes, groups=self.groups,
            group_objects=self.group_objects, fleets=self.fleets,
            members=members, overlaps=overlaps,
            jobs=self.ordered_jobs(priorities), job_pods=self.job_pods,
            endpoints=list(self.endpoints.values()), endpoint_pods=self.endpoint_pods,
            seen_unhealthy=self.seen_unhealthy, healthy_since=self.healthy_since,
            noticed=self.noticed,
            # what the report thread writes (operator.reports): copies, so that no
            # decision iterates a dict while a report adds to it
            blamed=dict(self.blamed), clean_probes=dict(self.clean_probes),
            probe_runs=dict(self.probe_runs), probed_at=dict(self.probed_at),
            inconclusive=dict(self.inconclusive), progress=dict(self.progress),
            steps=dict(self.steps), paces=dict(self.paces), stragglers=dict(self.stragglers),
            probe_image=self.settings.probe_image, last_sweep=self.last_sweep,
            group_written=self.group_written, accounts=self.accounts, accounted=self.accounted,
            renewing=self.renewing, device_taints=self.device_taints,
            scaled=self.scaled,
            refused=self.refused, memo=self.fits,
            workloads=self.workloads, flavors=self.flavors, kueue=self.kueue,
            workload_refusals=self.workload_refusals,
            delegated=list(self.delegated.values()),
            delegated_endpoints=list(self.delegated_endpoints.values()),
            cluster_name=self.settings.cluster_name, proxy=self.proxy, classes=classes,
            priorities=priorities,
            require_queue=self.settings.require_queue, ignored_pods=self.ignored_pods,
            report_url=self.settings.report_url, write_budget=self.write_budget,
            standby_per_namespace=self.settings.standby_per_namespace,
            searches_per_namespace=self.settings.searches_per_namespace, searched=self.searched,
            refresh_seconds=badput.refresh_seconds(sum(
                1 for job in self.jobs.values()
                if (job.get("status") or {}).get("phase") == "Running")))

    def note_turns(self, keys: Iterable[TurnKey], clock: float) -> None:
        """The objects that had a turn at placement in the pass of CLOCK (decide.turns):
        the next turns go to those that waited longer."""
        for key in keys:
            self.searched[key] = clock

    def defer_writes(self, count: int) -> None:
        """COUNT writes wait for the next pass, which is asked for: bulk work (thousands
        of replicas) is spread over short passes, so a node failure is never queued
        behind it."""
        if count:
            self.deferred_writes += count
            self.wake.set()

    def reserve(self, reservations: Iterable[Reservation]) -> None:
        """Make a decision's reservations: its pods count on their nodes from now on,
        before they exist or bind (the watch events that follow change nothing)."""
        for reservation in reservations:
            fleet = self.fleets.get(reservation.group)
            if fleet is not None:
                fleet.bind(reservation.pod_key, reservation.node, reservation.accelerators,
                           reservation.owner)

    def release_reservation(self, key: str) -> None:
        for fleet in self.fleets.values():
            fleet.release(key)

    def release_unbound(self, owner: str) -> None:
        """Give back OWNER's reservations for pods that do not exist (a failed gang's
        ranks that were never created); its pods that do exist leave as they go."""
        for fleet in self.fleets.values():
            for key in list(fleet.by_owner.get(owner, ())):
                if key not in self.pods:
                    fleet.release(key)

    def note_creates(self, key: tuple[str, str], refusal: str | None, now: float) -> None:
        """The outcome of a pass's creates for workload KEY: REFUSAL, the API server's
        words when it refused one for good, counts towards failing it; None clears. The
        decisions try again only once its backoff has run out (Refusal.retry_at)."""
        if refusal is None:
            self.refused.pop(key, None)
            return
        times = self.refused[key].times + 1 if key in self.refused else 1
        self.refused[key] = Refusal(times, refusal, now)

    def note_workload(self, owner: OwnerKey, workload: str, refusal: str | None,
                      now: float) -> None:
        """The outcome of creating OWNER's Workload: REFUSAL, the API server's words when it
        refused it for good (said on the owner; tried again after a backoff of at most
        2**WORKLOAD_RETRY_TIMES s); None clears."""
        if refusal is None:
            self.workload_refusals.pop(owner, None)
            return
        held = self.workload_refusals.get(owner)
        times = held[1].times + 1 if held is not None and held[0] == workload else 1
        self.workload_refusals[owner] = (workload, Refusal(min(times, WORKLOAD_RETRY_TIMES),
                                                           refusal, now))
        if held is None or held[1].message != refusal:
            self.wake.set()  # said on the owner in the next pass

    def report_lock(self, job: tuple[str, str]) -> asyncio.Lock:
        """Reports of one job are applied one at a time (each writes what it read)."""
        return self._locks.setdefault(job, asyncio.Lock())

    def wake_urgently(self) -> None:
        self.wake.set()
        self.urgent.set()

    async def bulk(self, call: Callable[..., T], *args: Any) -> T:
        """CALL(*ARGS) as one of the endpoints' bulk writes: as many at once as
        `bulk_limit` admits (at most BULK_WRITES; fewer while the API server is slow), on
        threads of their own (the API threads every other call uses never queue behind a
        rollout), and none starts while `bulk_open` is clear (urgent work is being
        applied: its requests are the API server's first)."""
        async with self._bulk_slots:
            await self._bulk_slots.wait_for(self.bulk_limit.admits)
            self.bulk_limit.in_flight += 1
        try:
            await self.bulk_open.wait()
            started = time.monotonic()
            try:
                return await asyncio.get_running_loop().run_in_executor(
                    self._bulk_threads, functools.partial(call, *args))
            finally:
                self.bulk_limit.observe(started, time.monotonic())
                metrics.BULK_LIMIT.set(int(self.bulk_limit.limit))
        finally:
            async with self._bulk_slots:
                self.bulk_limit.in_flight -= 1
                self._bulk_slots.notify_all()

    def wake_at(self, when: float | None) -> None:
        """Ask for a pass at WHEN (a grace period or backoff runs out then)."""
        if when is not None and (self.deadline is None or when < self.deadline):
            self.deadline = when

    # ---- groups --------------------------------------------------------------
    def upsert_group(self, body: Obj) -> None:
        body = slim(body)
        name = body["metadata"]["name"]
        spec = UltraServerGroupSpec.model_validate(body["spec"])
        self.group_objects[name] = body
        if self.groups.get(name) != spec:
            self.groups[name] = spec
            self._rebuild_fleets()  # membership of overlapping groups may change
        self.wake.set()

    def remove_group(self, name: str) -> None:
        self.groups.pop(name, None)
        self.group_objects.pop(name, None)
        self.fleets.pop(name, None)
        self.accounts.pop(name, None)
        self._rebuild_fleets()
        self.wake.set()

    def _selecting(self, labels: dict[str, str]) -> list[str]:
        """The groups whose selector matches LABELS, oldest first (then by name): a node
        belongs to the first, so that overlapping selectors never count it twice."""
        return sorted((g for g, spec in self.groups.items() if matches(spec.node_selector,
                                                                     labels)),
                      key=lambda g: (self.group_objects[g]["metadata"].get(
                          "creationTimestamp", ""), g))

    def group_of(self, labels: dict[str, str]) -> str | None:
        """The group a node belongs to (State._selecting)."""
        selecting = self._selecting(labels)
        return selecting[0] if selecting else None

    def members_by_group(self) -> dict[str, dict[str, Obj]]:
        """Every group's nodes by name, in one scan of the nodes (not one per group)."""
        return self.membership()[0]

    def membership(self) -> tuple[dict[str, dict[str, Obj]], dict[str, dict[str, list[str]]]]:
        """Every group's nodes by name, and the overlaps: for each group, the nodes its
        selector matches that an older group keeps (by that group), in one scan."""
        found: dict[str, dict[str, Obj]] = {group: {} for group in self.groups}
        overlaps: dict[str, dict[str, list[str]]] = {}
        for name, node in self.nodes.items():
            selecting = self._selecting(node["metadata"].get("labels") or {})
            if not selecting:
                continue
            found[selecting[0]][name] = node
            for later in selecting[1:]:
                overlaps.setdefault(later, {}).setdefault(selecting[0], []).append(name)
        return found, overlaps

    def _rebuild_fleets(self) -> None:
        pods = [self._held(p) for p in self.pods.values()]
        members = self.members_by_group()
        self.fleets = {name: Fleet.from_objects(GroupShape.from_spec(spec),
                                                members[name].values(), pods)
                       for name, spec in self.groups.items()}
        for claim in self.claims:
            self._count_claim(claim)

    # ---- nodes ---------------------------------------------------------------
    def upsert_node(self, body: Obj) -> None:
        """A node changed. Heartbeats (every node, every few seconds) change nothing the
        fleet reads, so they are stored without touching the fleets or waking the loop."""
        body = slim_node(body)
        name = body["metadata"]["name"]
        previous = self.nodes.get(name)
        self.nodes[name] = body
        if previous is not None and node_digest(previous) == node_digest(body):
            return
        owner = self.group_of(body["metadata"].get("labels") or {})
        for group, fleet in self.fleets.items():
            if group == owner:
                joined = name not in fleet.nodes
                fleet.upsert_node(body)
                if joined and name in fleet.nodes:  # pods on it from before it joined
                    for pod in self.pods.values():  # (a scan, but only when a node joins)
                        held = self._held(pod)
                        if held.get("spec", {}).get("nodeName") == name:
                            fleet.observe_pod(held)
                    for claim in [k for k, use in self.claims.items() if use.node == name]:
                        self._count_claim(claim)  # and DRA claims allocated on it
            else:
                fleet.remove_node(name)
        self.wake_urgently()

    def remove_node(self, name: str) -> None:
        self.nodes.pop(name, None)
        for fleet in self.fleets.values():
            fleet.remove_node(name)
        self.wake_urgently()

    # ---- node leases -----------------------------------------------------------
    def renew_lease(self, node: str, renewed: float) -> None:
        """A kubelet renewed its node's Lease. A node is judged by its Lease only once a
        renewal has been seen happen: a Lease nobody renews (a simulated node's, one left
        from a node long gone) says nothing. No pass is woken: the group pass looks when
        the next renewal is due (health.quarantine)."""
        last = self.leases.get(node)
        self.leases[node] = renewed
        if last is not None and renewed > last:
            recent = self._intervals.setdefault(node, deque(maxlen=5))
            recent.append(renewed - last)
            self.renewing[node] = Renewal(renewed, max(recent))

    def tainted_slices(self) -> list[str]:
        return list(self._slice_taints)

    def slice_taints(self, name: str, node: str | None, taints: list[DeviceTaint]) -> None:
        """A ResourceSlice NAME (for NODE) now has these device TAINTS ([] or gone: none).
        Only slices with taints are kept; a change wakes a pass (the group judges it)."""
        before = self._slice_taints.pop(name, None)
        if node and taints:
            self._slice_taints[name] = (node, taints)
        touched = {before[0]} if before else set()
        if node:
            touched.add(node)
        for each in touched:
            found = [t for n, held in self._slice_taints.values() if n == each for t in held]
            if found:
                self.device_taints[each] = found
            else:
                self.device_taints.pop(each, None)
        if before != self._slice_taints.get(name):
            self.wake_urgently()

    # ---- DRA claims ----------------------------------------------------------
    def upsert_claim(self, key: str, use: ClaimUse | None) -> None:
        """Claim KEY (namespace/name) now holds USE (None: gone or unallocated): counted in
        every group that claims devices by DRA, as the pods of other tenants are."""
        before = self.claims.pop(key, None)
        for pod in before.pods if before else ():
            self._claims_of_pod.get(pod, set()).discard(key)
        if use is not None and use.node:
            self.claims[key] = use
            for pod in use.pods:
                self._claims_of_pod.setdefault(pod, set()).add(key)
        self._count_claim(key)
        if before != self.claims.get(key):
            self.wake.set()

    def _count_claim(self, key: str) -> None:
        """Count claim KEY's devices on its node, unless the fleet counts them by the pod:
        the claim the operator gave one of its own pods (resources.claims.CLAIM). Any other
        claim counts, a template's own beside the operator's included."""
        use = self.claims.get(key)
        ours = use is not None and use.pod_claim == CLAIM and any(
            (pod := self.pods.get(p)) is not None and self._is_own(pod) for p in use.pods)
        for fleet in self.fleets.values():
            if not fleet.shape.claims:
                continue
            count = use.count(fleet.shape.device_class) if use is not None else 0
            if use is None or use.node is None or ours or not count:
                fleet.release(f"claim/{key}")
            else:
                fleet.bind(f"claim/{key}", use.node, count, f"claim/{key}")

    def forget_lease(self, node: str) -> None:
        self.leases.pop(node, None)
        self.renewing.pop(node, None)
        self._intervals.pop(node, None)

    # ---- pods ----------------------------------------------------------------
    def upsert_pod(self, body: Obj) -> None:
        """A pod as a watch event or our own API call returned it; an event older than
        what we already hold (our create/patch response came first) is ignored."""
        body = slim_pod(body)
        key = pod_key(body)
        if _older(body, self.pods.get(key)):
            return
        labels = body["metadata"].get("labels") or {}
        self.pods[key] = body
        self._observe_pod(key, body)
        for claim in self._claims_of_pod.get(key, ()):  # ours now: counted by the pod
            self._count_claim(claim)
        if names.JOB_LABEL in labels:
            job = (body["metadata"].get("namespace", "default"), labels[names.JOB_LABEL])
            self.job_pods[job][body["metadata"]["name"]] = body
            if ending(body):
                self.wake_urgently()
            else:
                self.wake.set()
        if names.ENDPOINT_LABEL in labels:
            endpoint = (body["metadata"].get("namespace", "default"), labels[names.ENDPOINT_LABEL])
            self.endpoint_pods[endpoint][body["metadata"]["name"]] = body
            self.serving_version += 1
            self.wake.set()

    def _observe_pod(self, key: str, body: Obj, now: float | None = None) -> None:
        """Count the pod on its node in every fleet (an unbound one where it books:
        topology.bookings); a pod whose device request cannot be read is left out (logged
        and counted), never fatal to a pass or the start-up."""
        own, where = self._booking(body, now)
        self.ignored_pods.pop(key, None)
        self.booking_until.pop(key, None)
        if where.ignored is not None and where.pinned is not None:
            self.ignored_pods[key] = (where.pinned, where.ignored)
        if where.until is not None:
            self.booking_until[key] = where.until
            self.wake_at(where.until)
        held = self._as_counted(body, own, where)
        if not all([fleet.observe_pod(held) for fleet in self.fleets.values()]):
            metrics.SKIPPED_OBJECTS.labels("Pod").inc()
            log.warning("pod %s left out of the fleet model: its device request is not a "
                        "whole number of devices", key)

    def _held(self, pod: Obj, now: float | None = None) -> Obj:
        """POD as the fleets count it, at NOW: where it books (topology.bookings), and,
        when it is not the operator's, without the operator's annotations (on a foreign
        pod they mean nothing: TENANCY.md rule 3)."""
        return self._as_counted(pod, *self._booking(pod, now))

    def _booking(self, pod: Obj, now: float | None) -> tuple[bool, Booking]:
        own = self._is_own(pod)
        return own, booking(pod, own, time.time() if now is None else now)

    @staticmethod
    def _as_counted(pod: Obj, own: bool, where: Booking) -> Obj:
        held = booked(pod, where)
        return held if own else without_our_annotations(held)

    def _is_own(self, pod: Obj) -> bool:
        """POD is the operator's: its controller is a TrainingJob or InferenceEndpoint the
        operator holds, by UID (a label or annotation proves nothing)."""
        meta = pod["metadata"]
        ref = controller_of(pod)
        if ref is None or ref.get("kind") not in ("TrainingJob", "InferenceEndpoint"):
            return False
        held = (self.jobs if ref["kind"] == "TrainingJob" else self.endpoints).get(
            (meta.get("namespace", "default"), ref.get("name", "")))
        return held is not None and held["metadata"].get("uid") == ref.get("uid")

    def expire_bookings(self, clock: float) -> None:
        """Foreign pinned pods whose booking ran out (topology.bookings) book no more."""
        for key in [k for k, until in self.booking_until.items() if until <= clock]:
            pod = self.pods.get(key)
            if pod is None:
                self.booking_until.pop(key, None)
            else:
                self._observe_pod(key, pod, clock)

    def remove_pod(self, body: Obj) -> None:
        """A pod is gone. The watch is cluster-wide: a pod the operator never held (no
        devices, not ours) changes nothing and wakes nothing."""
        key = pod_key(body)
        self.ignored_pods.pop(key, None)
        self.booking_until.pop(key, None)
        if self.pods.pop(key, None) is None and not any(key in fleet.pods
                                                         for fleet in self.fleets.values()):
            return
        self.release_reservation(key)
        labels = body["metadata"].get("labels") or {}
        for label, index in ((names.JOB_LABEL, self.job_pods),
                             (names.ENDPOINT_LABEL, self.endpoint_pods)):
            if label in labels:
                owner = (body["metadata"].get("namespace", "default"), labels[label])
                index[owner].pop(body["metadata"]["name"], None)
                self.serving_version += 1
                if not index[owner]:
                    del index[owner]
        if names.JOB_LABEL in labels:
            self.wake_urgently()
        else:
            self.wake.set()

    # ---- jobs ----------------------------------------------------------------
    def upsert_job(self, body: Obj) -> None:
        meta = slim(body)["metadata"]
        key = (meta["namespace"], meta["name"])
        if (body.get("spec") or {}).get("managedBy") == MULTIKUEUE:  # immutable
            if not _older(body, self.delegated.get(key)):
                self.delegated[key] = body
                self.wake.set()
            return
        held = self.jobs.get(key)
        if not _older(body, held):
            self.jobs[key] = body
            if held is None or held["metadata"].get("uid") != meta.get("uid"):
                self._observe_own(self.job_pods.get(key, {}))
            if not _echo(body, held):
                self.wake_urgently()

    def _observe_own(self, pods: dict[str, Obj]) -> None:
        """A job or endpoint seen anew: its pods seen before it are its own now (and so
        are the claims the operator gave them)."""
        for pod in list(pods.values()):
            key = pod_key(pod)
            self._observe_pod(key, pod)
            for claim in self._claims_of_pod.get(key, ()):
                self._count_claim(claim)

    def wrote_job_status(self, job: Obj, version: str, fields: Obj) -> None:
        """The report channel's status write of FIELDS (None removes one), which made
        VERSION, applied to JOB as the report held it, and to the job the cache holds now
        when a watch event older than the write replaced it while the write was on its
        way: the next report of the job reads what this one wrote (a checkpoint it
        committed was undone by the next report's write of what it read before)."""
        meta = job["metadata"]
        current = self.jobs.get((meta["namespace"], meta["name"]))
        held = [job]
        if current is not None and current is not job and \
                current["metadata"].get("uid") == meta.get("uid") and \
                _older(current, {"metadata": {"resourceVersion": version}}):
            held.append(current)
        for obj in held:
            wrote(obj, version)
            status = {**(obj.get("status") or {})}  # replaced, never changed in place:
            for key, value in fields.items():       # the pass may be reading the old one
                if value is None:
                    status.pop(key, None)
                else:
                    status[key] = {k: v for k, v in value.items() if v is not None} \
                        if isinstance(value, dict) else value
            obj["status"] = status

    def job_spec(self, job: Obj) -> TrainingJobSpec:
        """JOB's spec, parsed once per version of the job's spec (a valid one: the job is
        a current worker's)."""
        key = key_of(job)
        view = self.job_views[key] = job_view(job, self.job_views.get(key))
        if view.spec is None:
            raise ValueError(f"TrainingJob {key[0]}/{key[1]}: invalid spec: {view.invalid}")
        return view.spec

    def endpoint_view(self, ie: Obj) -> EndpointView:
        """IE's view, its spec parsed once per version."""
        key = key_of(ie)
        view = self.endpoint_views[key] = endpoint_view(ie, self.endpoint_views.get(key))
        return view

    def remove_job(self, namespace: str, name: str) -> None:
        self.jobs.pop((namespace, name), None)
        self.workload_refusals.pop(("TrainingJob", namespace, name), None)
        self.delegated.pop((namespace, name), None)
        self.progress.pop((namespace, name), None)
        self.steps.pop((namespace, name), None)
        for table in (self.paces, self.stragglers, self.paces_judged):
            table.pop((namespace, name), None)
        self.refused.pop((namespace, name), None)
        self.ledgers.pop((namespace, name), None)
        self.job_views.pop((namespace, name), None)
        self._locks.pop((namespace, name), None)
        self.searched.pop(("TrainingJob", namespace, name), None)
        for fleet in self.fleets.values():  # reservations of pods that never bound
            fleet.release_owner(trainingjob_owner(namespace, name))
        self.wake_urgently()

    # ---- Kueue -------------------------------------------------------------------
    def upsert_workload(self, body: Obj) -> None:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        held = self.workloads.get(key)
        if not _older(body, held):
            self.workloads[key] = body
            if held is None or held.get("status") != body.get("status"):
                self.wake.set()

    def remove_workload(self, namespace: str, name: str) -> None:
        if self.workloads.pop((namespace, name), None) is not None:
            self.wake.set()

    def upsert_flavor(self, name: str, labels: dict[str, str] | None) -> None:
        if labels is None:
            self.flavors.pop(name, None)
        elif self.flavors.get(name) != labels:
            self.flavors[name] = labels
            self.wake.set()

    def serve_kueue(self, served: bool) -> None:
        if served != self.kueue:
            self.kueue = served
            self.wake.set()

    # ---- inference endpoints ---------------------------------------------------
    def upsert_endpoint(self, body: Obj) -> None:
        meta = slim(body)["metadata"]
        key = (meta["namespace"], meta["name"])
        if (body.get("spec") or {}).get("managedBy") == MULTIKUEUE:  # immutable
            if not _older(body, self.delegated_endpoints.get(key)):
                self.delegated_endpoints[key] = body
                self.wake.set()
            return
        held = self.endpoints.get(key)
        if not _older(body, held):
            self.endpoints[key] = body
            self.serving_version += 1
            if held is None or held["metadata"].get("uid") != meta.get("uid"):
                self._observe_own(self.endpoint_pods.get(key, {}))
            self.wake.set()

    def remove_endpoint(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        self.serving_version += 1
        self.endpoints.pop(key, None)
        self.delegated_endpoints.pop(key, None)
        self.endpoint_views.pop(key, None)
        self.workload_refusals.pop(("InferenceEndpoint", namespace, name), None)
        self.refused.pop(key, None)
        for kind in ("InferenceEndpoint", "InferenceEndpoint/regions"):  # decide.turns
            self.searched.pop((kind, namespace, name), None)
        for role in ("", *ROLE_NAMES):
            self.scaled.pop((namespace, name, role), None)
            self.scaling_history.pop((namespace, name, role), None)
        for fleet in self.fleets.values():
            fleet.release_owner(endpoint_owner(namespace, name))
        self.wake.set()

    def classes(self) -> Classes:
        return Classes(workload=self.priority_classes[WORKLOAD_PRIORITY_CLASS],
                       pod=self.priority_classes[PRIORITY_CLASS])

    def upsert_priority_class(self, source: str, name: str,
                              found: PriorityClass | None) -> None:
        """A class of SOURCE changed (None: deleted): every job's order may change."""
        held = self.priority_classes[source]
        if found is None:
            if held.pop(name, None) is not None:
                self.wake.set()
        elif held.get(name) != found:
            held[name] = found
            self.wake.set()

    def ordered_jobs(self, priorities: dict[Key, Priority]) -> list[Obj]:
        """By the admin's class first, then arrival, then each namespace's own order
        (decide.priority.in_order); PRIORITIES: every job's."""
        return in_order(list(self.jobs.values()), lambda j: priorities[_key_of(j)],
                        lambda j: (j["metadata"].get("creationTimestamp", ""),
                                   j["metadata"]["name"]))


def _key_of(job: Obj) -> Key:
    return job["metadata"]["namespace"], job["metadata"]["name"]
