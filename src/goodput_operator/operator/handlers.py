"""The kopf registrations: watch events of the custom resources feed `State`; a startup
handler primes it and starts the loops and the operator's own watches (operator.watches):
pods cluster-wide and nodes, both slim, where kopf would watch only the managed namespaces
and keep full bodies; the groups, from where the initial list left off; and node Leases.

Every handler is async so that all state changes happen on the event loop thread. No
handler here is a change-detection handler, so kopf never adds finalizers or annotations
to our objects: deletion is plain garbage collection through owner references.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import ssl
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import kopf

from goodput_operator import names
from goodput_operator.api.base import GROUP, VERSION
from goodput_operator.controllers import inferenceendpoint, routing
from goodput_operator.controllers.kube import API_CONNECTIONS, Kube
from goodput_operator.controllers.state import State
from goodput_operator.health.cadence import REPORTS_PER_SECOND
from goodput_operator.operator import loop
from goodput_operator.operator.access import AccessGate
from goodput_operator.operator.leader import LeaderElection
from goodput_operator.operator.reports import ReportServer
from goodput_operator.operator.runtime import Health, cancelled, prime
from goodput_operator.operator.watches import (
    ClaimWatch,
    FlavorWatch,
    GroupWatch,
    KueueWatch,
    LeaseWatch,
    NodeWatch,
    PodWatch,
    PriorityClassWatch,
    SliceWatch,
    Watch,
    WorkloadPriorityClassWatch,
    WorkloadWatch,
)
from goodput_operator.resources.probe import report_ca_config_map

log = logging.getLogger("goodput.operator")
KUEUE_SETTLE_SECONDS = 10.0  # the most a start waits for Kueue's Workloads to be listed
STATE = State()


@dataclass
class Options:
    """What the entrypoint decided (flags, environment); read once at startup."""
    kube: Kube | None = None
    namespaces: list[str] | None = None  # None: every namespace
    health_port: int = 0
    sd_auth: bool = True  # /sd/serving only for readers (operator.access)
    report_port: int = 0  # the workers' report channel (0: off)
    report_tls: ssl.SSLContext | None = None
    reports_per_job: int = REPORTS_PER_SECOND  # health.cadence: above it, every k-th step
    leader_election: bool = False
    lease_namespace: str = "goodput-system"
    lease_name: str = "goodput-operator"
    identity: str = field(default_factory=socket.gethostname)
    pod_namespace: str = ""  # this process's pod (leader label); empty outside a cluster
    pod_name: str = ""
    stop: asyncio.Event = field(default_factory=asyncio.Event)  # kopf's stop flag
    lost_leadership: bool = False


OPTIONS = Options()
_tasks: list[asyncio.Task[None]] = []
_shutdown: list[asyncio.Task[None]] = []  # the signal's shutdown, once
_servers: list[ReportServer | Health] = []
_election: list[LeaderElection] = []
_watches: list[Watch] = []


def _plain(body: Any) -> dict[str, Any]:
    return {k: dict(v) if hasattr(v, "items") else v for k, v in dict(body).items()}


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Serve health, list everything once (the watches start after this returns), then
    lead — at once, or after winning the Lease when leader election is on."""
    settings.persistence.finalizer = names.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=names.PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=names.PREFIX)
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 120  # re-list at least every 2 minutes
    settings.watching.client_timeout = 150
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    # one short-lived worker per object with pending events, no cap: a cap (we had 64)
    # with workers that linger idle_timeout let events of thousands of pods queue up,
    # full bodies and all (900 MB and minutes of lag at 10k pods)
    settings.queueing.worker_limit = None
    settings.queueing.idle_timeout = 1.0
    settings.scanning.disabled = True
    kube = OPTIONS.kube or Kube()
    # API calls run in threads: as many as the client's connection pool (the default
    # executor has cpu_count + 4, so six on two cores, and bursts of creates queue there)
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(max_workers=API_CONNECTIONS, thread_name_prefix="api"))
    if OPTIONS.leader_election and not _election:
        _election.append(LeaderElection(kube, OPTIONS.lease_namespace, OPTIONS.lease_name,
                                        OPTIONS.identity))
    election = _election[0] if _election else None
    leading = election.holds if election else (lambda: True)
    if election is not None:
        kube.fence = election.holds  # no write lands once the lease has lapsed
    if OPTIONS.health_port and not _servers:
        gate = AccessGate(kube, "/sd/serving") if OPTIONS.sd_auth else None
        await _serve(Health(STATE, kube, leading, sd_gate=gate), OPTIONS.health_port)
    await _label_own_pod(kube, False)
    if not STATE.primed:
        await prime(STATE, kube, OPTIONS.namespaces)
    if not _watches:  # from where the initial list left off (Leases: a list of their own)
        events = asyncio.get_running_loop()
        for watch, version in ((PodWatch(STATE, kube, events), STATE.pods_version),
                               (NodeWatch(STATE, kube, events), STATE.nodes_version),
                               (GroupWatch(STATE, kube, events), STATE.groups_version),
                               (LeaseWatch(STATE, kube, events), ""),
                               (SliceWatch(STATE, kube, events), ""),
                               (ClaimWatch(STATE, kube, events), ""),
                               (FlavorWatch(STATE, kube, events), ""),
                               (PriorityClassWatch(STATE, kube, events), ""),
                               (WorkloadPriorityClassWatch(STATE, kube, events), ""),
                               (WorkloadWatch(STATE, kube, events), "")):
            watch.start(version)
            _watches.append(watch)
        for first in (w for w in _watches if isinstance(w, KueueWatch | PriorityClassWatch)):
            # Kueue's Workloads and every priority class listed (or Kueue found absent)
            # before the first pass: no job is first ordered without its class
            await asyncio.to_thread(first.settled.wait, KUEUE_SETTLE_SECONDS)
    if OPTIONS.report_port and not any(isinstance(s, ReportServer) for s in _servers):
        await _serve(ReportServer(STATE, kube, leading, OPTIONS.reports_per_job),
                     OPTIONS.report_port, OPTIONS.report_tls)

    async def lead() -> None:
        await _label_own_pod(kube, True)
        if STATE.settings.report_ca:  # what the probe Jobs check the report channel's TLS against
            try:
                await asyncio.to_thread(kube.replace_config_map, report_ca_config_map(
                    STATE.settings.probe_namespace, STATE.settings.report_ca))
            except Exception as err:  # probes then report without a CA, and say so
                log.warning("could not write the report CA for probes to %s: %s",
                            STATE.settings.probe_namespace, err)
        _tasks.append(asyncio.create_task(loop.run_loop(STATE, kube), name="reconcile"))
        _tasks.append(asyncio.create_task(inferenceendpoint.run_autoscaler(STATE),
                                          name="autoscaler"))
        if STATE.settings.haproxy_runtime_api:
            _tasks.append(asyncio.create_task(routing.run_router(
                STATE, routing.RuntimeApi(STATE.settings.haproxy_runtime_api)),
                name="router"))

    def lost() -> None:
        OPTIONS.lost_leadership = True
        OPTIONS.stop.set()

    if election is None:
        await lead()
    else:
        _tasks.append(asyncio.create_task(election.run(lead, lost), name="leader-election"))
    _stop_on_signals(asyncio.get_running_loop())


def _stop_on_signals(loop: asyncio.AbstractEventLoop) -> None:
    """On SIGTERM kopf first waits up to 5 s for our loops (to kopf they are hung tasks)
    and only then runs `stop`, so the standby waited that long for the Lease. Replacing
    kopf's handler: stop our loops and give the Lease back first, then stop kopf."""
    def on_signal() -> None:
        if not _shutdown:
            _shutdown.append(loop.create_task(_stop_then_kopf(), name="shutdown"))

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(sig, on_signal)


async def _stop_then_kopf() -> None:
    await shutdown()
    OPTIONS.stop.set()


async def _serve(server: Health | ReportServer, port: int,
                 tls: ssl.SSLContext | None = None) -> None:
    try:
        await server.start(port, tls=tls)
    except OSError as err:  # the port is taken: stop with the reason, never retry forever
        raise kopf.PermanentError(f"cannot serve on port {port}: {err}") from err
    _servers.append(server)


async def _label_own_pod(kube: Kube, leading: bool) -> None:
    """Mark this replica's pod as the leader (or not): the report Service selects it."""
    if not OPTIONS.pod_name:
        return
    labels = {names.LEADER_LABEL: "true" if leading else None}
    try:
        await asyncio.to_thread(kube.label_own_pod, OPTIONS.pod_namespace, OPTIONS.pod_name,
                                labels)
    except Exception as err:  # the label only routes reports
        log.warning("could not label pod %s/%s: %s", OPTIONS.pod_namespace, OPTIONS.pod_name,
                    err)


@kopf.on.cleanup()
async def stop(**_: Any) -> None:
    await shutdown()  # done already when a signal stopped us (_stop_on_signals)


async def shutdown() -> None:
    """Graceful shutdown: stop the loops between API calls, close the servers, give the
    lease back so the standby takes over within seconds. Idempotent."""
    await cancelled(_tasks)
    _tasks.clear()
    for server in _servers:
        await server.stop()
    _servers.clear()
    for election in _election:  # on the lease's own thread: after a renewal in flight
        await asyncio.get_running_loop().run_in_executor(election.executor,
                                                         election.release)
    _election.clear()
    for watch in _watches:
        watch.stop()
    _watches.clear()


@kopf.on.event(GROUP, VERSION, "trainingjobs")
async def job_event(type: str, body: kopf.Body, namespace: str | None, name: str,
                    **_: Any) -> None:
    if type == "DELETED":
        STATE.remove_job(namespace or "default", name)
    else:
        STATE.upsert_job(_plain(body))


@kopf.on.event(GROUP, VERSION, "inferenceendpoints")
async def endpoint_event(type: str, body: kopf.Body, namespace: str | None, name: str,
                         **_: Any) -> None:
    if type == "DELETED":
        STATE.remove_endpoint(namespace or "default", name)
    else:
        STATE.upsert_endpoint(_plain(body))
