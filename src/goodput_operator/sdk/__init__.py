"""Worker-side helpers for training code: tell the operator about checkpoints and steps.

    from goodput_operator.sdk import checkpoint, fingerprint, flush_reports, report_step
    point = checkpoint.resume_point()       # where the operator says this attempt resumes
    report_step(step, {"loss": 1.93}, fingerprint=fingerprint(model.parameters()),
                checkpoint=step % 100 == 0)     # every rank, at a step it will checkpoint
    checkpoint.save(step, lambda folder: torch.save(state, folder / "state.pt"))  # commits
    flush_reports()                         # once training ends: the reports held back

(examples/trainer/train.py is a whole trainer built on these.)

Standard library only (no kopf, no kubernetes client): it runs in every worker image.
The worker proves who it is with its pod's projected ServiceAccount token (audience
goodput.dev/report, mounted by the operator at GOODPUT_REPORT_TOKEN); the operator checks
it with a TokenReview and accepts reports only for the job that owns the pod. Workers get
no Kubernetes rights at all.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import ssl
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from goodput_operator import names
from goodput_operator.sdk.fingerprint import fingerprint

__all__ = [
    "ReportError",
    "Reporter",
    "checkpoint_interval",
    "commit_checkpoint",
    "fingerprint",
    "flush_reports",
    "report_step",
    "reporting_every",
    "save_requested",
    "spread_phase",
]

QUEUED = 64  # step sends a background reporter holds while the operator is slow or away;
# past it the oldest go (the newest steps are what hang detection and the votes need)
RETRIES = 10  # a 503, 429 or unreachable operator is tried again this often, backing off
# 0.5, 1, 2, then 4 s (backoff): ~31 s in all, past a crashed leader's Lease (15 s), the
# standby's next try (2 s) and the report Service's endpoints moving to it; three tries
# (3.5 s) ended inside a hand-over, and a checkpoint's commit or votes sent then were lost.


class ReportError(RuntimeError):
    """The operator refused the report (status and its reason) or could not be reached."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(f"report refused ({status}): {message}" if status else message)
        self.status = status


class Reporter:
    """One worker's channel to the operator; reads its settings from the environment the
    operator gave the pod, or takes them explicitly (tests, custom launchers).

    BACKGROUND: step reports are sent by a thread of the reporter's own and report_step
    returns at once, so a training step never waits for the operator (a leader hand-over's
    503s and backoff, a slow answer); the answer's `every` and save ask take effect when it
    arrives, as ranks already learn them a report apart. The module's helpers
    (report_step, flush_reports) use such a reporter."""

    def __init__(self, url: str | None = None, token: str | None = None,
                 token_path: str | None = None, timeout: float = 10.0,
                 ca_file: str | None = None, job: str | None = None, retries: int = RETRIES,
                 background: bool = False) -> None:
        self.url = (url or os.environ.get(names.ENV_REPORT_URL, "")).rstrip("/")
        self.token = token
        self.token_path = token_path or os.environ.get(names.ENV_REPORT_TOKEN,
                                                       names.REPORT_TOKEN_PATH)
        self.timeout = timeout
        self.retries = retries
        # an https report URL is checked against the CA the operator put beside the hostfile
        ca_file = ca_file or os.environ.get(names.ENV_REPORT_CA) or None
        self.context = ssl.create_default_context(cafile=ca_file) \
            if ca_file and Path(ca_file).is_file() else None
        self.rank = int(os.environ.get(names.ENV_RANK, "0") or 0)
        self.job = job or os.environ.get(names.ENV_JOB) or None
        # the operator's latest ask, from the last step report's answer: {"reason":
        # "Preemption", "by", "deadline"} while the job is being preempted; else None
        self.save_request: dict[str, Any] | None = None
        # the checkpoint interval the operator advises (status.checkpointAdvice), seconds
        self.checkpoint_interval: float | None = None
        # report every this many steps, as the operator's last answer asked (it keeps a
        # large gang's reports at about 500 a second); 1 until it says otherwise
        self.every = 1
        # reports of voted steps held back to their rank's phase (spread_phase): (the step
        # they are sent at, the body)
        self.deferred: list[tuple[int, dict[str, Any]]] = []
        # one kept-alive connection per thread (the background sender's and the caller's
        # checkpoint commits may be in flight at once; a connection is not shared)
        self._connections: dict[int, http.client.HTTPConnection] = {}
        self.background = background
        self.dropped = 0  # step sends the background queue let go (it held QUEUED)
        self.failure: ReportError | None = None  # the background sender's, not yet raised
        self._queue: deque[list[dict[str, Any]]] = deque(maxlen=QUEUED)
        self._ready = threading.Condition()
        self._sending = False
        self._sender: threading.Thread | None = None

    def _token(self) -> str:
        # re-read each time: the kubelet rotates projected tokens
        return self.token if self.token is not None else \
            Path(self.token_path).read_text().strip()

    def send(self, kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST one report. A 503 (a standby operator replica answered during a leader
        hand-over, or the token could not be checked in time), a 429 (too many new tokens
        from this address) or an unreachable operator is retried RETRIES times (backoff)."""
        for attempt in range(self.retries + 1):
            try:
                return self._send_once(kind, body)
            except ReportError as err:
                if err.status not in (None, 429, 503) or attempt == self.retries or \
                        not self.url:
                    raise
                time.sleep(backoff(attempt))
        raise AssertionError("unreachable")

    def _send_once(self, kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
        if not self.url:
            raise ReportError(None, "GOODPUT_REPORT_URL is not set: not running under the "
                                    "goodput operator?")
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json",
                   "Authorization": f"Bearer {self._token()}"}
        path = f"{urllib.parse.urlsplit(self.url).path}/v1/reports/{kind}"
        for reused in (threading.get_ident() in self._connections, False):
            connection = self._connect()
            try:
                connection.request("POST", path, body=data, headers=headers)
                response = connection.getresponse()
                payload = response.read()
            except (http.client.HTTPException, OSError) as err:
                self._drop()
                if reused:  # a kept-alive connection the operator had closed: a new one
                    continue
                raise ReportError(None, f"cannot reach the operator at {self.url}: "
                                        f"{err}") from None
            if response.status >= 400:
                detail = payload.decode(errors="replace")
                with contextlib.suppress(ValueError, AttributeError):
                    detail = json.loads(detail).get("error", detail)
                raise ReportError(response.status, detail)
            answer: dict[str, Any] = json.loads(payload or b"{}")
            return answer
        raise AssertionError("unreachable")

    def _connect(self) -> http.client.HTTPConnection:
        """The connection reports go over, kept alive between them: a large gang's workers
        each report every step, and a new TCP (and TLS) connection per report was most of
        a report's cost at the operator (bench/reports.py)."""
        connection = self._connections.get(threading.get_ident())
        if connection is None:
            parts = urllib.parse.urlsplit(self.url)
            host = parts.hostname or "localhost"
            if parts.scheme == "https":
                connection = http.client.HTTPSConnection(
                    host, parts.port or 443, timeout=self.timeout,
                    context=self.context or ssl.create_default_context())
            else:
                connection = http.client.HTTPConnection(host, parts.port or 80,
                                                        timeout=self.timeout)
            self._connections[threading.get_ident()] = connection
        return connection

    def _drop(self) -> None:
        """Close this thread's connection (its next report opens a new one)."""
        connection = self._connections.pop(threading.get_ident(), None)
        if connection is not None:
            connection.close()

    def close(self) -> None:
        """Close the kept-alive connections (the next report opens a new one)."""
        for key in list(self._connections):
            connection = self._connections.pop(key, None)
            if connection is not None:
                connection.close()

    def commit_checkpoint(self, step: int, path: str, digest: str | None = None,
                          save_seconds: float | None = None) -> dict[str, Any]:
        """Record a completed checkpoint: the job resumes from it after a failure.
        SAVE_SECONDS: how long saving it stalled training (the job's goodput counts it)."""
        body: dict[str, Any] = {"step": step, "path": path, "digest": digest,
                                "rank": self.rank, "job": self.job}
        if save_seconds is not None:
            body["saveSeconds"] = round(max(0.0, save_seconds), 3)
        return self.send("checkpoint", body)

    def report_corrupt(self, step: int, path: str, why: str) -> dict[str, Any]:
        """Say that committed checkpoint STEP at PATH is not what was committed (its digest
        differs on load): the job never resumes from it again."""
        return self.send("checkpoint", {"step": step, "path": path, "corrupt": why,
                                        "rank": self.rank, "job": self.job})

    def report_step(self, step: int, metrics: Mapping[str, float] | None = None,
                    fingerprint: str | None = None, shard: str | int = 0,
                    checkpoint: bool = False) -> dict[str, Any]:
        """Report progress; with FINGERPRINT (sdk.fingerprint of this replica's parameters
        or all-reduced gradients) the step is voted on across the replicas of SHARD.

        Only every k-th step is reported, k as the operator's last answer said (`every`; 1
        for most jobs, more for a gang of thousands), and each rank sends its report of such
        a step spread_phase steps later: the gang's reports of one voted step arrive over
        the k steps to the next, not all at once. A step that sends nothing returns
        {"skipped": True} without a request; one that sends returns the last answer, or
        with BACKGROUND {"queued": True} at once (and raises, once, the ReportError an
        earlier send met). Sent at once whatever k, after any report still held back (so
        that the step they vote on is complete first): a step a checkpoint is taken at
        (CHECKPOINT, on every rank, so that its vote verifies the checkpoint), a step whose
        numbers are NaN or infinite (the SDC guard's evidence), and every step while the
        operator asks for a save."""
        numbers = dict(metrics or {})
        body: dict[str, Any] = {"step": step, "metrics": numbers,
                                "rank": self.rank, "job": self.job, "shard": str(shard)}
        if fingerprint is not None:
            body["fingerprint"] = fingerprint
        if checkpoint or self.save_request is not None or \
                not all(math.isfinite(v) for v in numbers.values()):
            return self._dispatch([*self._held(None), body])
        if step % self.every == 0:
            self.deferred.append((step + spread_phase(self.rank, self.every), body))
        due = self._held(step)
        return self._dispatch(due) if due else {"skipped": True}

    def flush(self, timeout: float = 30.0) -> dict[str, Any]:
        """Send the reports still held back (a trainer's last steps, before it exits); with
        BACKGROUND, wait up to TIMEOUT seconds for everything queued to be sent."""
        if not self.background:
            return self._deliver(self._held(None))
        held = self._held(None)
        if held:
            self._enqueue(held)
        with self._ready:
            self._ready.wait_for(lambda: not self._queue and not self._sending, timeout)
        self._raise_failure()
        return {"queued": True} if held else {"skipped": True}

    def _dispatch(self, bodies: list[dict[str, Any]]) -> dict[str, Any]:
        if not self.background:
            return self._deliver(bodies)
        # The failure an *earlier* send met, taken before this call's bodies are queued: the
        # sender may fail on them before this returns, and that failure is the next call's.
        failure = self._take_failure()
        self._enqueue(bodies)
        if failure is not None:
            raise failure
        return {"queued": True}

    def _enqueue(self, bodies: list[dict[str, Any]]) -> None:
        with self._ready:
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1  # the oldest, as the deque appends
            self._queue.append(bodies)
            self._ready.notify_all()
        if self._sender is None:
            self._sender = threading.Thread(target=self._send_queued, daemon=True,
                                            name="goodput-reports")
            self._sender.start()

    def _take_failure(self) -> ReportError | None:
        with self._ready:
            failure, self.failure = self.failure, None
        return failure

    def _raise_failure(self) -> None:
        failure = self._take_failure()
        if failure is not None:
            raise failure

    def _send_queued(self) -> None:
        """The background sender: the queued step sends, oldest first, one at a time."""
        while True:
            with self._ready:
                self._ready.wait_for(lambda: bool(self._queue))
                bodies = self._queue.popleft()
                self._sending = True
            try:
                self._deliver(bodies)
            except ReportError as err:
                with self._ready:
                    self.failure = err
            finally:
                with self._ready:
                    self._sending = False
                    self._ready.notify_all()

    def _held(self, step: int | None) -> list[dict[str, Any]]:
        """Take the held-back reports due by STEP (None: all of them), oldest first."""
        due = [body for at, body in self.deferred if step is None or at <= step]
        self.deferred = [(at, body) for at, body in self.deferred
                         if step is not None and at > step]
        return due

    def _deliver(self, bodies: list[dict[str, Any]]) -> dict[str, Any]:
        """Send BODIES in order; the operator's answers set `every` and the save ask."""
        answer: dict[str, Any] = {"skipped": True}
        for body in bodies:
            answer = self.send("step", body)
            self.save_request = answer.get("save")
            advised = answer.get("checkpointIntervalSeconds")
            if isinstance(advised, (int, float)) and advised > 0:
                self.checkpoint_interval = float(advised)
            every = answer.get("every")
            self.every = every if isinstance(every, int) and every >= 1 else 1
        return answer


def backoff(attempt: int) -> float:
    """Seconds to wait after failed try ATTEMPT (0 the first): doubling from 0.5, at most 4."""
    return min(4.0, 0.5 * 2.0 ** attempt)


def spread_phase(rank: int, every: int) -> int:
    """How many steps after a voted step RANK sends its report of it, when the operator
    asks for every EVERY-th step: ranks 0, k, 2k, ... at once, ranks 1, k+1, ... a step
    later, and so on, so that each step carries 1/k of the gang's reports. All ranks at
    once, k steps apart, was a burst of the whole gang (bench/reports.py): the leader's
    queue, not its rate, set the latency. The votes still compare the same step on every
    rank, complete k - 1 steps later; the hang clock reads the newest step reported
    (rank 0 sends on time); a rank's pace, the time between its own reports, is kept."""
    return rank % every if every > 1 else 0


_default: Reporter | None = None


def _reporter() -> Reporter:
    global _default
    if _default is None:
        _default = Reporter(background=True)
    return _default


def commit_checkpoint(step: int, path: str, digest: str | None = None,
                      save_seconds: float | None = None) -> dict[str, Any]:
    """Record a completed checkpoint with the operator (see Reporter.commit_checkpoint)."""
    return _reporter().commit_checkpoint(step, path, digest, save_seconds)


def save_requested() -> dict[str, Any] | None:
    """Whether the operator asks this job's workers to save a checkpoint now (the latest
    answer to a step report, sent in the background): {"reason": "Preemption", "by": the
    preempting job, "deadline": when the workers are stopped, saved or not}, or, when a
    node of the gang is about to go, {"reason": the notice's kind (SpotInterruption,
    Drain, ...), "by": "node/NAME", "deadline": when its ranks move}; None otherwise.
    Save and commit as usual: the job resumes from that checkpoint. Every rank that
    writes a shard must save the same step: agree on it first (an all-reduce of the flag,
    as examples/trainer/train.py does), as ranks see the ask steps apart."""
    return _reporter().save_request


def checkpoint_interval() -> float | None:
    """The seconds of training between checkpoints the operator advises for this job: Daly's
    optimum for the job's measured save cost and its group's failure rate
    (status.checkpointAdvice, docs/recovery.md); None until it has one. It comes with the
    answers to step reports, so ranks may see a new value steps apart: agree on when to
    save (examples/trainer/train.py's --checkpoint-every 0 does)."""
    return _reporter().checkpoint_interval


def report_step(step: int, metrics: Mapping[str, float] | None = None,
                fingerprint: str | None = None, shard: str | int = 0,
                checkpoint: bool = False) -> dict[str, Any]:
    """Report a training step to the operator (see Reporter.report_step), from a thread
    of its own: it returns at once, {"queued": True} or {"skipped": True}. Pass
    CHECKPOINT=True on every rank at a step that will be checkpointed."""
    return _reporter().report_step(step, metrics, fingerprint, shard, checkpoint)


def reporting_every() -> int:
    """Every how many steps this rank reports, as the operator's latest answer asks."""
    return _reporter().every


def flush_reports(timeout: float = 30.0) -> dict[str, Any]:
    """Send the step reports still held back to this rank's phase or queued (see
    Reporter.report_step), waiting up to TIMEOUT seconds: call it once training ends,
    before the process exits."""
    return _reporter().flush(timeout)
