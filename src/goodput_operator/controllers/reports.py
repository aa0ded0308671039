"""The workers' report channel: POST /v1/reports/{checkpoint,step} with the pod's projected
ServiceAccount token (audience goodput.dev/report) as a bearer token.

The token is checked with a TokenReview; the pod it is bound to (name and uid in the
review's extra fields) must be a worker of the current attempt of a TrainingJob, and the
report goes to that job only. Workers hold no Kubernetes rights: a stolen token can at
most report for its own job, until its pod is gone (bound tokens die with the pod).
401: no or invalid token; 403: a token of no current worker; 400: a malformed body;
409: a worker of an older attempt.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from goodput_operator import metrics
from goodput_operator.api.base import describe_errors
from goodput_operator.api.reports import KINDS, CheckpointReport, Report
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.controllers.kube import Kube
from goodput_operator.controllers.state import State
from goodput_operator.health.quarantine import iso
from goodput_operator.resources.trainingjob import JOB_LABEL, RANK_LABEL, RESTART_LABEL
from goodput_operator.sdk import AUDIENCE

Obj = dict[str, Any]
log = logging.getLogger("goodput.reports")
MAX_BODY = 64 * 1024
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ReportServer:
    def __init__(self, state: State, kube: Kube) -> None:
        self.state = state
        self.kube = kube
        self.runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/v1/reports/{kind}", self.handle)
        return app

    async def start(self, port: int, host: str = "0.0.0.0",
                    tls: ssl.SSLContext | None = None) -> None:
        self.runner = web.AppRunner(self.app(), access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, host, port, ssl_context=tls).start()
        log.info("worker reports on %s://%s:%d/v1/reports", "https" if tls else "http", host,
                 port)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        kind = request.match_info["kind"]
        try:
            answer = await self._handle(kind, request)
        except Refused as err:
            metrics.REPORTS.labels(kind if kind in KINDS else "unknown", str(err.status)).inc()
            log.info("report %s refused (%d): %s", kind, err.status, err)
            return web.json_response({"error": str(err)}, status=err.status)
        metrics.REPORTS.labels(kind, "200").inc()
        return web.json_response(answer)

    async def _handle(self, kind: str, request: web.Request) -> Obj:
        if kind not in KINDS:
            raise Refused(404, f"no report kind {kind!r}; use one of {sorted(KINDS)}")
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer ") or not header[7:].strip():
            raise Refused(401, "missing bearer token (the pod's goodput.dev/report token)")
        pod = await self._authenticate(header[7:].strip())
        try:
            report = KINDS[kind].model_validate(json.loads(await request.read()))
        except ValidationError as err:
            raise Refused(400, f"malformed {kind} report: {describe_errors(err)}") from None
        except ValueError as err:
            raise Refused(400, f"malformed {kind} report: not JSON ({err})") from None
        job = self._job_of(pod)
        meta = job["metadata"]
        if report.job is not None and report.job != f"{meta['namespace']}/{meta['name']}":
            raise Refused(403, f"the token belongs to a worker of {meta['namespace']}/"
                               f"{meta['name']}, not of {report.job}")
        if kind == "checkpoint":
            assert isinstance(report, CheckpointReport)
            return await self._checkpoint(job, pod, report)
        return self._step(job, pod, report)

    async def _authenticate(self, token: str) -> Obj:
        review = await asyncio.to_thread(self.kube.review_token, token, [AUDIENCE])
        if not review.get("authenticated"):
            raise Refused(401, f"token rejected: {review.get('error') or 'not authenticated'}")
        user = review.get("user") or {}
        extra = user.get("extra") or {}
        parts = str(user.get("username", "")).split(":")
        names, uids = extra.get(POD_NAME) or [], extra.get(POD_UID) or []
        if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"] or not names:
            raise Refused(403, "the token is not bound to a pod")
        pod = self.state.pods.get(f"{parts[2]}/{names[0]}")
        if pod is None or pod["metadata"].get("uid") != (uids or [None])[0]:
            raise Refused(403, f"pod {parts[2]}/{names[0]} is not a current worker")
        return pod

    def _job_of(self, pod: Obj) -> Obj:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        job = self.state.jobs.get((meta["namespace"], labels.get(JOB_LABEL, "")))
        if job is None:
            raise Refused(403, f"pod {meta['namespace']}/{meta['name']} is not a TrainingJob "
                               "worker")
        restarts = int((job.get("status") or {}).get("restarts", 0))
        if labels.get(RESTART_LABEL) != str(restarts):
            raise Refused(409, f"pod {meta['name']} belongs to attempt "
                               f"{labels.get(RESTART_LABEL)}; the job is at attempt {restarts}")
        return job

    async def _checkpoint(self, job: Obj, pod: Obj, report: CheckpointReport) -> Obj:
        meta = job["metadata"]
        ref = {"step": report.step, "path": report.path, "time": iso(time.time())}
        if report.digest:
            ref["digest"] = report.digest
        checkpoint: Obj = {"latest": ref}
        if not TrainingJobSpec.model_validate(job["spec"]).checkpoint.verify:
            checkpoint["latestVerified"] = ref  # nothing to verify against
        await asyncio.to_thread(self.kube.patch_status, "trainingjobs", meta["namespace"],
                                meta["name"], {"checkpoint": checkpoint})
        status = job.setdefault("status", {})
        status["checkpoint"] = {**(status.get("checkpoint") or {}), **checkpoint}
        log.info("%s/%s: checkpoint step %d at %s (from %s)", meta["namespace"], meta["name"],
                 report.step, report.path, pod["metadata"]["name"])
        self.state.wake.set()
        return {"accepted": True, "checkpoint": checkpoint}

    def _step(self, job: Obj, pod: Obj, report: Report) -> Obj:
        meta = job["metadata"]
        labels = pod["metadata"].get("labels") or {}
        self.state.progress[(meta["namespace"], meta["name"])] = {
            "step": report.step, "rank": int(labels.get(RANK_LABEL, 0)),
            "time": iso(time.time()),
            "metrics": dict(getattr(report, "metrics", {}))}
        self.state.wake.set()
        return {"accepted": True}
