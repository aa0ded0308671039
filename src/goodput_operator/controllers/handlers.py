"""The kopf registrations: watch events feed `State`; a startup handler starts the loops.

Every handler is async so that all state changes happen on the event loop thread. No
handler here is a change-detection handler, so kopf never adds finalizers or annotations
to our objects: deletion is plain garbage collection through owner references.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any

import kopf
from pydantic import ValidationError

from goodput_operator.api.base import GROUP, VERSION
from goodput_operator.controllers import inferenceendpoint, trainingjob
from goodput_operator.controllers.kube import Kube
from goodput_operator.controllers.reports import ReportServer
from goodput_operator.controllers.state import State
from goodput_operator.resources.inference import ENDPOINT_LABEL
from goodput_operator.resources.trainingjob import JOB_LABEL

log = logging.getLogger("goodput.operator")
STATE = State()
KUBE: Kube | None = None  # set by the entrypoint before kopf starts (fails fast there)
REPORT_PORT = 0  # the workers' report channel (0: off); set by the entrypoint
REPORT_TLS: ssl.SSLContext | None = None
_tasks: list[asyncio.Task[None]] = []
_servers: list[ReportServer] = []


def _plain(body: Any) -> dict[str, Any]:
    return {k: dict(v) if hasattr(v, "items") else v for k, v in dict(body).items()}


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = "goodput.dev/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="goodput.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="goodput.dev")
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 120  # re-list at least every 2 minutes
    settings.watching.client_timeout = 150
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    settings.batching.worker_limit = 64
    settings.scanning.disabled = True
    kube = KUBE or Kube()
    if REPORT_PORT:
        server = ReportServer(STATE, kube)
        await server.start(REPORT_PORT, tls=REPORT_TLS)
        _servers.append(server)
    _tasks.append(asyncio.create_task(trainingjob.run_loop(STATE, kube), name="reconcile"))
    _tasks.append(asyncio.create_task(inferenceendpoint.run_autoscaler(STATE),
                                      name="autoscaler"))


@kopf.on.cleanup()
async def stop(**_: Any) -> None:
    for task in _tasks:
        task.cancel()
    await asyncio.gather(*_tasks, return_exceptions=True)
    _tasks.clear()
    for server in _servers:
        await server.stop()
    _servers.clear()


@kopf.on.event(GROUP, VERSION, "ultraservergroups")
async def group_event(type: str, body: kopf.Body, name: str, **_: Any) -> None:
    if type == "DELETED":
        STATE.remove_group(name)
        return
    try:
        STATE.upsert_group(_plain(body))
    except ValidationError as err:
        log.error("UltraServerGroup %s is invalid and ignored: %s", name, err)


@kopf.on.event("", "v1", "nodes")
async def node_event(type: str, body: kopf.Body, name: str, **_: Any) -> None:
    if type == "DELETED":
        STATE.remove_node(name)
    else:
        STATE.upsert_node(_plain(body))


@kopf.on.event("", "v1", "pods")
async def pod_event(type: str, body: kopf.Body, **_: Any) -> None:
    plain = _plain(body)
    if type == "DELETED":
        STATE.remove_pod(plain)
        return
    labels = plain["metadata"].get("labels") or {}
    requests_devices = any("/" in resource
                           for container in plain.get("spec", {}).get("containers") or []
                           for resource in (container.get("resources") or {}).get("requests")
                           or {})
    if requests_devices or JOB_LABEL in labels or ENDPOINT_LABEL in labels:
        STATE.upsert_pod(plain)


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
