"""The workers' report channel: POST /v1/reports/{checkpoint,step} with the pod's projected
ServiceAccount token (audience goodput.dev/report) as a bearer token.

The token is checked with a TokenReview; the pod it is bound to (name and uid in the
review's extra fields) must be a worker of the current attempt of a TrainingJob, and the
report goes to that job only. Workers hold no Kubernetes rights: a stolen token can at
most report for its own job, until its pod is gone (bound tokens die with the pod).
401: no or invalid token; 403: a token of no current worker; 400: a malformed body;
409: a worker of an older attempt; 429: too many new tokens from one address; 503: the
token could not be checked in time, or this replica is a standby.

The server runs on a thread of its own, with its own event loop: a report never waits for
the operator's pass (a 2,048-worker job's decision holds the operator's loop for about
0.1 s, and the reports that arrived meanwhile all waited for it). What the two threads
share stays safe under the GIL: a report reads the caches by single lookups and copies
(never iterates a dict the watches change), replaces the job's status rather than
changing it in place, and sets the operator's wake events on the operator's loop
(`_wake`). The books the pass iterates are copied into its snapshot (State.snapshot).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import math
import posixpath
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from aiohttp import web
from pydantic import ValidationError

from goodput_operator import metrics, names, times
from goodput_operator.api.base import describe_errors
from goodput_operator.api.reports import (
    KINDS,
    CheckpointReport,
    ProbeReport,
    Report,
    StepReport,
)
from goodput_operator.api.statuses import ProgressDict
from goodput_operator.api.trainingjob import MAX_CHECKPOINT_HISTORY, TrainingJobSpec
from goodput_operator.controllers.kube import Kube
from goodput_operator.controllers.state import State
from goodput_operator.decide.attempt import strict_checkpoints
from goodput_operator.health import badput, sdc, straggler
from goodput_operator.health.cadence import REPORTS_PER_SECOND
from goodput_operator.health.hang import StepClock
from goodput_operator.health.probing import Inconclusive, inconclusive
from goodput_operator.health.quarantine import SDC, STRAGGLER, Finding
from goodput_operator.health.straggler import Pace
from goodput_operator.operator.tokens import POD_NAME, POD_UID, Refused, TokenGate, bearer
from goodput_operator.resources import trainingjob as build
from goodput_operator.resources.pods import attempt_of, index_of, owned
from goodput_operator.resources.probe import expects
from goodput_operator.topology.record import node_of

Obj = dict[str, Any]
log = logging.getLogger("goodput.reports")
MAX_BODY = 64 * 1024
JUDGE_SECONDS = 5.0  # how often a job's ranks' paces are compared (a gang has thousands)


NonFinite = Literal["NaN", "+Inf", "-Inf"]


def progress_of(report: StepReport, rank: int, now: float, restart: int = 0,
                every: int = 1) -> ProgressDict:
    """status.progress for a step report. NaN and infinities (what a diverging step sends)
    are kept by name under nonFinite: JSON has no such numbers, and a status patch that
    carried one would be refused whole, on every pass, phase and restarts with it."""
    finite = {k: v for k, v in report.metrics.items() if math.isfinite(v)}
    odd: dict[str, NonFinite] = {k: "NaN" if math.isnan(v) else "+Inf" if v > 0 else "-Inf"
                                 for k, v in report.metrics.items() if not math.isfinite(v)}
    progress: ProgressDict = {"step": report.step, "rank": rank, "restart": restart,
                              "time": times.millis(now), "metrics": finite}
    if every > 1:
        progress["every"] = every
    if odd:
        progress["nonFinite"] = odd
    return progress


def step_answer(decided: Obj, job: Obj, every: int) -> Obj:
    """The answer to a step report: what was decided of it, the save the job asks for
    while it is preempted, how often to report (health.cadence): every step while a save
    is asked for, so the step it is saved at is voted on; and the checkpoint interval
    advised for the job (decide.advising), once there is one."""
    save = save_request(job)
    advice = ((job.get("status") or {}).get("checkpointAdvice") or {}).get("intervalSeconds")
    advised = {"checkpointIntervalSeconds": advice} if advice else {}
    return {**decided, "every": 1 if save else every, **save, **advised}


def inside(path: str, root: str) -> bool:
    """PATH names ROOT or something in it (a directory, or a URI prefix such as
    s3://bucket/run), once . and .. are resolved: a worker commits only checkpoints under
    its job's directory, never another job's or a path of its choosing."""
    scheme, sep, rest = root.partition("://")
    if sep:
        if not path.startswith(scheme + sep):
            return False
        root, path = rest, path[len(scheme + sep):]
    elif "://" in path:
        return False
    base = posixpath.normpath("/" + root.lstrip("/"))
    found = posixpath.normpath("/" + path.lstrip("/"))
    return found == base or found.startswith(base.rstrip("/") + "/")


def save_request(job: Obj) -> Obj:
    """What a step report's answer asks of the workers: save a checkpoint now, while the
    job is being preempted (status.preemption) or a node of its gang is about to go
    (status.notice: decide.noticing); sdk.save_requested reads it."""
    status = job.get("status") or {}
    preemption, notice = status.get("preemption"), status.get("notice")
    if preemption:
        return {"save": {"reason": "Preemption", "by": preemption.get("by"),
                         "deadline": preemption.get("deadline")}}
    if notice:
        return {"save": {"reason": notice.get("kind"), "by": f"node/{notice.get('node')}",
                         "deadline": notice.get("deadline")}}
    return {}


class ReportServer:
    def __init__(self, state: State, kube: Kube,
                 leading: Callable[[], bool] = lambda: True,
                 reports_per_job: float = REPORTS_PER_SECOND) -> None:
        self.state = state
        self.kube = kube
        self.leading = leading  # a standby replica refuses (503): only the leader writes
        self.reports_per_job = reports_per_job  # above it a job reports every k-th step
        self.tokens = TokenGate(kube)
        self.runner: web.AppRunner | None = None
        self.operator_loop: asyncio.AbstractEventLoop | None = None  # where State's events live
        self.loop: asyncio.AbstractEventLoop | None = None  # the report thread's
        self.thread: threading.Thread | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/v1/reports/{kind}", self.handle)
        return app

    async def start(self, port: int, host: str = "0.0.0.0",
                    tls: ssl.SSLContext | None = None) -> None:
        """Serve on a thread of its own; returns once listening (OSError: the port is
        taken)."""
        self.operator_loop = asyncio.get_running_loop()
        listening: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.thread = threading.Thread(target=self._serve, args=(port, host, tls, listening),
                                       name="reports", daemon=True)
        self.thread.start()
        await asyncio.wrap_future(listening)
        log.info("worker reports on %s://%s:%d/v1/reports", "https" if tls else "http", host,
                 port)

    def _serve(self, port: int, host: str, tls: ssl.SSLContext | None,
               listening: concurrent.futures.Future[None]) -> None:
        loop = self.loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._listen(port, host, tls))
        except BaseException as err:
            listening.set_exception(err)
            loop.close()
            return
        listening.set_result(None)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(self._close())
            loop.close()

    async def _listen(self, port: int, host: str, tls: ssl.SSLContext | None) -> None:
        self.runner = web.AppRunner(self.app(), access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, host, port, ssl_context=tls).start()

    async def _close(self) -> None:
        await self.tokens.renewed(cancel=True)  # tokens being reviewed again
        if self.runner is not None:
            await self.runner.cleanup()

    async def stop(self) -> None:
        """Stop the report thread (it closes its server, answering what is in flight)."""
        loop, thread = self.loop, self.thread
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            await asyncio.to_thread(thread.join, 10.0)
        self.tokens.close()

    def _wake(self, urgent: bool = False) -> None:
        """Wake the operator's pass (URGENT: its lanes too) from the report thread: the
        events belong to the operator's loop, and are set there."""
        wake = self.state.wake_urgently if urgent else self.state.wake.set
        if self.operator_loop is None:  # the app served on the operator's own loop
            wake()
        else:
            self.operator_loop.call_soon_threadsafe(wake)

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
        if not self.leading():
            raise Refused(503, "this operator replica is a standby; retry (the leader takes "
                               "reports)")
        token = bearer(request.headers.get("Authorization", ""))
        if token is None:
            raise Refused(401, "missing bearer token (the pod's goodput.dev/report token)")
        pod = self._pod_of(await self.tokens.review(token, request.remote or "unknown"))
        try:
            report = KINDS[kind].model_validate(json.loads(await request.read()))
        except ValidationError as err:
            raise Refused(400, f"malformed {kind} report: {describe_errors(err)}") from None
        except ValueError as err:
            raise Refused(400, f"malformed {kind} report: not JSON ({err})") from None
        if isinstance(report, ProbeReport):
            return await self._probe(pod, report)
        assert isinstance(report, Report)
        job = self._job_of(pod)
        meta = job["metadata"]
        if report.job is not None and report.job != f"{meta['namespace']}/{meta['name']}":
            raise Refused(403, f"the token belongs to a worker of {meta['namespace']}/"
                               f"{meta['name']}, not of {report.job}")
        async with self.state.report_lock((meta["namespace"], meta["name"])):
            # the job as it is now: a report that waited here behind others must not write
            # back what it read before them (a checkpoint committed meanwhile was undone)
            job = self._job_of(pod)
            if isinstance(report, CheckpointReport):
                return await self._checkpoint(job, pod, report)
            assert isinstance(report, StepReport)
            decided = await self._step(job, pod, report)
            clock = self.state.steps.get((meta["namespace"], meta["name"]))
            return step_answer(decided, job, clock.every if clock is not None else 1)

    def _pod_of(self, review: Obj) -> Obj:
        """The pod an authenticated token is bound to: it must exist with the same UID."""
        user = review.get("user") or {}
        extra = user.get("extra") or {}
        parts = str(user.get("username", "")).split(":")
        pod_names, uids = extra.get(POD_NAME) or [], extra.get(POD_UID) or []
        if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"] or not pod_names:
            raise Refused(403, "the token is not bound to a pod")
        pod = self.state.pods.get(f"{parts[2]}/{pod_names[0]}")
        if pod is None or pod["metadata"].get("uid") != (uids or [None])[0]:
            raise Refused(403, f"pod {parts[2]}/{pod_names[0]} is not a current worker")
        return pod

    def _job_of(self, pod: Obj) -> Obj:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        job = self.state.jobs.get((meta["namespace"], labels.get(names.JOB_LABEL, "")))
        if job is None or not owned([pod], job) or index_of(pod) < 0:
            raise Refused(403, f"pod {meta['namespace']}/{meta['name']} is not a TrainingJob "
                               "worker")
        restarts = int((job.get("status") or {}).get("restarts", 0))
        if attempt_of(pod) != restarts:
            raise Refused(409, f"pod {meta['name']} belongs to attempt "
                               f"{labels.get(names.RESTART_LABEL)}; the job is at attempt "
                               f"{restarts}")
        rank = index_of(pod)
        placed = node_of((job.get("status") or {}).get("placement"), rank)
        if meta["name"] != build.pod_name(job["metadata"]["name"], restarts, rank) or \
                placed is None or pod.get("spec", {}).get("nodeName") != placed:
            # a pod of the tenant's making, with the job as its owner and a rank label,
            # bound to another team's node, must not get that node blamed
            raise Refused(403, f"pod {meta['name']} is not the job's worker for rank {rank} "
                               f"on its placed node ({placed or 'none placed'})")
        return job

    async def _checkpoint(self, job: Obj, pod: Obj, report: CheckpointReport) -> Obj:
        meta = job["metadata"]
        spec = self.state.job_spec(job)
        if spec.checkpoint.dir is None or not inside(report.path, spec.checkpoint.dir):
            raise Refused(400, f"checkpoint path {report.path!r} is not inside the job's "
                               f"spec.checkpoint.dir ({spec.checkpoint.dir or 'unset'}): "
                               "workers resume only from the job's own checkpoints")
        status = job.get("status") or {}
        current = dict(status.get("checkpoint") or {})
        now = time.time()
        if report.corrupt:
            marked = sdc.corrupt(current, report.step, report.path, report.corrupt)
            if marked is None:
                raise Refused(404, f"no committed checkpoint at step {report.step} and "
                                   f"{report.path!r} to mark corrupt")
            current = marked
        else:
            ref = {"step": report.step, "path": report.path, "time": times.millis(now)}
            if report.digest:
                ref["digest"] = report.digest
            if report.save_seconds:
                ref["saveSeconds"] = round(report.save_seconds, 3)
            history = [h for h in current.get("history") or [] if h["step"] != report.step]
            current["history"] = [*history, {**ref, "verified": False}][-MAX_CHECKPOINT_HISTORY:]
            current["latest"] = ref
        ledger = self._ledger(job, spec)
        checkpoint = sdc.settle(current, status.get("sdc") or {}, ledger.unanimous,
                                strict_checkpoints(spec))
        await self._write(job, {"checkpoint": checkpoint})
        self._wake()  # a new resume point; the pass counts the save's stall
        if report.corrupt:
            resume = badput.resume_point(checkpoint, strict_checkpoints(spec))
            message = (f"checkpoint step {report.step} at {report.path} is corrupt "
                       f"({report.corrupt}); restarts resume from "
                       f"{(resume or {}).get('path') or 'the start'}")
            log.warning("%s/%s: %s (from %s)", meta["namespace"], meta["name"], message,
                        pod["metadata"]["name"])
            await asyncio.to_thread(self.kube.event, job, "CheckpointCorrupt", message,
                                    "Warning")
        else:
            log.info("%s/%s: checkpoint step %d at %s (from %s)", meta["namespace"],
                     meta["name"], report.step, report.path, pod["metadata"]["name"])
        return {"accepted": True, "checkpoint": checkpoint}

    async def _step(self, job: Obj, pod: Obj, report: StepReport) -> Obj:
        meta = job["metadata"]
        key = (meta["namespace"], meta["name"])
        spec = self.state.job_spec(job)
        rank = index_of(pod)
        now = time.time()
        attempt = int((job.get("status") or {}).get("restarts", 0))
        clock = self.state.steps.get(key)
        if clock is None or clock.attempt != attempt:
            clock = self.state.steps[key] = StepClock(attempt)
            self._wake()  # the attempt's first step: its hangs are judged from now
        # later steps wake nothing: the pass writes the progress when it runs (at least
        # every resync) and judges a hang from the clock whenever it looks; a pass per
        # report would be thousands a second from a large gang
        every = clock.heard(report.step, now, self.reports_per_job)
        if report.step >= clock.step:  # not a late report of an older step (sdk.spread_phase)
            self.state.progress[key] = progress_of(report, rank, now, attempt, every)
        await self._pace(job, spec, pod, rank, report, attempt, now)
        if report.fingerprint is None and not report.metrics:
            return {"accepted": True}
        ledger = self._ledger(job, spec)
        votes = ledger.add(report.step, report.shard, rank, report.fingerprint) \
            if report.fingerprint and spec.sdc.cross_replica_check else []
        fired = sdc.guard(report.step, report.metrics, list(ledger.losses),
                          spec.sdc.loss_spike_factor)
        if "loss" in report.metrics and fired is None:
            ledger.losses.append(report.metrics["loss"])
        if not votes and fired is None:
            return {"accepted": True}
        status = job.get("status") or {}
        observed, divergent = sdc.absorb(status.get("sdc") or {"attempt": ledger.attempt},
                                         votes, fired, report.step, ledger.unanimous)
        checkpoint = sdc.settle(status.get("checkpoint") or {}, observed, ledger.unanimous,
                                strict_checkpoints(spec))
        await self._write(job, {"sdc": observed, "checkpoint": checkpoint})
        if fired or divergent:  # evidence the pass acts on (a step that agreed is not)
            self._wake(urgent=True)
        if fired:
            log.warning("%s/%s: guard: %s", meta["namespace"], meta["name"], fired)
            await asyncio.to_thread(self.kube.event, job, "StepGuard", fired, "Warning")
        for result in divergent:
            await self._suspect(job, result, ledger.newly_suspected(result.suspects))
        return {"accepted": True, "votes": [v.message for v in votes]}

    async def _pace(self, job: Obj, spec: TrainingJobSpec, pod: Obj, rank: int,
                    report: StepReport, attempt: int, now: float) -> None:
        """Record the rank's pace and, at most every JUDGE_SECONDS, judge the ranks: a
        straggler newly found is an event (and with action quarantine, its node blamed:
        the group pass quarantines it and the rank moves); the verdict is kept for the
        job's Straggler condition, replaced only when the set of slow nodes changes."""
        meta = job["metadata"]
        key = (meta["namespace"], meta["name"])
        pace = self.state.paces.get(key)
        if pace is None or pace.attempt != attempt:
            pace = self.state.paces[key] = Pace(attempt)
            self.state.stragglers.pop(key, None)
        pace.record(rank, pod.get("spec", {}).get("nodeName") or "", report.step, now,
                    report.metrics.get(straggler.METRIC))
        policy = spec.failure_policy.straggler
        if not policy.enabled or now < self.state.paces_judged.get(key, 0.0) + JUDGE_SECONDS:
            return
        self.state.paces_judged[key] = now
        found = straggler.stragglers(pace, policy.factor, policy.min_steps)
        before = {s.node for s in self.state.stragglers.get(key, [])}
        if {s.node for s in found} == before:
            return
        self.state.stragglers[key] = found
        self._wake(urgent=True)
        for slow in (s for s in found if s.node not in before):
            log.warning("%s/%s: straggler: %s", meta["namespace"], meta["name"], slow.evidence)
            metrics.STRAGGLERS.labels(meta["namespace"], meta["name"]).inc()
            if policy.action == "quarantine":
                self.state.blamed[slow.node] = Finding(
                    STRAGGLER, slow.evidence, now, f"{meta['namespace']}/{meta['name']}")
            await asyncio.to_thread(self.kube.event, job, "Straggler", slow.evidence, "Warning")

    async def _suspect(self, job: Obj, result: sdc.Vote, ranks: list[int]) -> None:
        """Blame the nodes of RANKS, outside the majority and not blamed before in this
        attempt: the group pass quarantines them (storm guard permitting) and the job
        recovers from its verified checkpoint. Blaming again on every later divergent step
        would quarantine the node anew after an operator released it by hand."""
        meta = job["metadata"]
        placement = (job.get("status") or {}).get("placement")
        for rank in ranks:
            node = node_of(placement, rank)  # the placement's node, never a pod's claim
            if not node:
                continue
            evidence = f"rank {rank} on {node}: {result.message}"
            self.state.blamed[node] = Finding(SDC, evidence, time.time(),
                                              f"{meta['namespace']}/{meta['name']}",
                                              "accelerator")
            metrics.SDC_SUSPICIONS.labels(meta["namespace"], meta["name"]).inc()
            log.warning("%s/%s: SDC suspected: %s", meta["namespace"], meta["name"], evidence)
            await asyncio.to_thread(self.kube.event, job, "SdcSuspected", evidence, "Warning")
        self._wake(urgent=True)

    async def _probe(self, pod: Obj, report: ProbeReport) -> Obj:
        """A probe pod's verdict on its own node: a bad device quarantines the node; clean
        runs count towards releasing a node quarantined for corruption."""
        meta = pod["metadata"]
        probed = (meta.get("annotations") or {}).get(names.PROBE_NODE_ANNOTATION)
        if meta["namespace"] != self.state.settings.probe_namespace or probed is None or \
                (meta.get("labels") or {}).get(names.PROBE_LABEL) != "true":
            raise Refused(403, f"pod {meta['namespace']}/{meta['name']} is not a probe pod "
                               f"(namespace {self.state.settings.probe_namespace}, label "
                               f"{names.PROBE_LABEL}=true)")
        if not (probed == report.node == pod.get("spec", {}).get("nodeName")):
            raise Refused(403, f"probe pod {meta['name']} runs on "
                               f"{pod.get('spec', {}).get('nodeName')} for {probed}; it cannot "
                               f"report on {report.node}")
        if meta["uid"] in self.state.probed:
            raise Refused(409, f"probe pod {meta['name']} already reported")
        self.state.probed.add(meta["uid"])
        node = report.node
        self.state.probe_runs[node] = self.state.probe_runs.get(node, 0) + 1
        expected = expects(meta.get("annotations") or {})
        why = None if expected is None else inconclusive(
            expected[0], report.backend, len(report.devices), expected[1])
        if why is not None and report.ok and not report.bad:  # proves nothing either way
            image = (meta.get("annotations") or {}).get(names.PROBE_IMAGE_ANNOTATION, "")
            self.state.inconclusive[node] = Inconclusive(image, why)
            metrics.PROBES.labels("inconclusive").inc()
            log.warning("probe of %s inconclusive: %s", node, why)
            await asyncio.to_thread(self.kube.event, self.state.nodes.get(node) or pod,
                                    "ProbeInconclusive", f"probe {meta['name']} of {node} "
                                    f"inconclusive: {why}", "Warning")
            self._wake()
            return {"accepted": True, "inconclusive": why,
                    "cleanProbes": self.state.clean_probes.get(node, 0)}
        self.state.inconclusive.pop(node, None)
        if report.ok and not report.bad:
            self.state.clean_probes[node] = self.state.clean_probes.get(node, 0) + 1
            self.state.probed_at[node] = time.time()
            metrics.PROBES.labels("clean").inc()
            log.info("probe of %s clean (%d in a row): %s", node,
                     self.state.clean_probes[node], report.message)
        else:
            self.state.clean_probes[node] = 0
            bad = ", ".join(f"{d.index} ({d.name}): {d.detail}" for d in report.devices
                            if not d.ok) or ", ".join(map(str, report.bad))
            evidence = f"probe {meta['name']}: bad device(s) {bad}"
            self.state.blamed[node] = Finding(SDC, evidence, time.time(),
                                              failure_class="accelerator")
            metrics.PROBES.labels("bad").inc()
            log.warning("probe of %s failed: %s", node, evidence)
        self._wake(urgent=True)
        return {"accepted": True, "cleanProbes": self.state.clean_probes[node]}

    def _ledger(self, job: Obj, spec: TrainingJobSpec) -> sdc.Ledger:
        """The job's votes of its current attempt (a restart starts a new ledger)."""
        meta = job["metadata"]
        key = (meta["namespace"], meta["name"])
        attempt = int((job.get("status") or {}).get("restarts", 0))
        ledger = self.state.ledgers.get(key)
        if ledger is None or ledger.attempt != attempt:
            placement = (job.get("status") or {}).get("placement") or {}
            workers = int(placement.get("workers") or spec.workers)
            ledger = sdc.Ledger(max(1, workers // spec.sdc.shards), attempt=attempt,
                                max_shards=spec.sdc.shards)
            self.state.ledgers[key] = ledger
        return ledger

    async def _write(self, job: Obj, fields: Obj) -> None:
        meta = job["metadata"]
        written = await asyncio.to_thread(self.kube.patch_status, "trainingjobs",
                                          meta["namespace"], meta["name"], fields)
        self.state.wrote_job_status(job, written, fields)
