"""The workers' SDK: what it retries (a standby's 503, an unreachable operator) and what not."""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from goodput_operator.operator.leader import LeaderElection
from goodput_operator.sdk import QUEUED, RETRIES, Reporter, ReportError, backoff
from tests.unit.local_http import AskingEvery, Handler, serving


class Scripted(Handler):
    answers: ClassVar[list[int]] = []
    seen: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.seen.append(self.path)
        self.rfile.read(int(self.headers["Content-Length"]))
        code = self.answers.pop(0)
        self.answer(code, {"ok": True} if code == 200 else {"error": f"scripted {code}"})


@pytest.fixture
def server() -> Iterator[str]:
    Scripted.seen.clear()
    with serving(Scripted) as url:
        yield url


@pytest.mark.parametrize(("case", "answers", "outcome", "tries"), [
    ("a standby answers during a hand-over, then the leader", [503, 503, 200], 200, 3),
    ("too many new tokens from this address: retried", [429, 200], 200, 2),
    ("a refusal is final: no retry", [403], 403, 1),
    ("a malformed report is final", [400], 400, 1),
    ("503 past the retry budget surfaces", [503, 503], 503, 2),
])
def test_what_the_reporter_retries(server: str, case: str, answers: list[int], outcome: int,
                                   tries: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.sleep", lambda _: None)
    Scripted.answers = list(answers)
    reporter = Reporter(url=server, token="t", retries=1 if case.startswith("503 past")
                        else 3)
    if outcome == 200:
        assert reporter.report_step(5) == {"ok": True}, case
    else:
        with pytest.raises(ReportError) as err:
            reporter.report_step(5)
        assert err.value.status == outcome, case
    assert len(Scripted.seen) == tries, case


def test_the_default_retries_outlast_a_leader_hand_over(
        server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crashed leader's Lease runs out and the standby's next try takes it: reports sent
    meanwhile are answered 503 by the standby (or not at all), and must not be lost."""
    slept: list[float] = []
    monkeypatch.setattr("time.sleep", slept.append)
    Scripted.answers = [503] * RETRIES + [200]
    assert Reporter(url=server, token="t").report_step(5) == {"ok": True}
    lease = inspect.signature(LeaderElection).parameters
    assert sum(slept) > lease["duration"].default + lease["retry_period"].default
    assert slept == [backoff(a) for a in range(RETRIES)]


class Preempting(Handler):
    asks: ClassVar[list[dict[str, str] | None]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        ask = self.asks.pop(0)
        self.answer(200, {"accepted": True, **({"save": ask} if ask else {})})


def test_the_reporter_keeps_the_operator_s_latest_ask_to_save() -> None:
    """A preempted job's step answers ask for a checkpoint; once the ask is gone (the
    preemption was cancelled), save_request is None again."""
    ask = {"reason": "Preemption", "by": "ns/high", "deadline": "2027-01-15T08:02:00Z"}
    Preempting.asks = [None, ask, None]
    with serving(Preempting) as url:
        reporter = Reporter(url=url, token="t")
        reporter.report_step(1)
        assert reporter.save_request is None
        reporter.report_step(2)
        assert reporter.save_request == ask
        reporter.report_step(3)
        assert reporter.save_request is None


class KeepAlive(Handler):
    """An HTTP/1.1 server that keeps connections open, recording the client port of each
    report, and drops the connection after the report numbered in `drop_after`."""

    protocol_version = "HTTP/1.1"
    ports: ClassVar[list[int]] = []
    drop_after: ClassVar[int] = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.ports.append(self.client_address[1])
        body = json.dumps({"accepted": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if len(self.ports) == self.drop_after:
            self.close_connection = True  # as a restarted operator's would be


def test_reports_share_one_kept_alive_connection_and_a_dropped_one_is_reopened() -> None:
    KeepAlive.ports, KeepAlive.drop_after = [], 3
    with serving(KeepAlive) as url:
        reporter = Reporter(url=url, token="t", retries=0)
        for step in range(1, 6):
            assert reporter.report_step(step) == {"accepted": True}
        reporter.close()
    assert len(KeepAlive.ports) == 5, "each report arrived once (none lost, none doubled)"
    assert len(set(KeepAlive.ports[:3])) == 1, "one connection for the first three"
    assert len(set(KeepAlive.ports[3:])) == 1 and KeepAlive.ports[3] != KeepAlive.ports[0]


class Cadenced(Handler):
    """An operator that asks for every 4th step, and for a save from step 12 on."""

    sent: ClassVar[list[int]] = []

    def do_POST(self) -> None:
        step = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["step"]
        self.sent.append(step)
        save = {"save": {"reason": "Preemption"}} if step >= 12 else {}
        self.answer(200, {"accepted": True, "every": 1 if save else 4, **save})


def test_the_reporter_sends_every_kth_step_and_always_checkpoints_bad_numbers_and_saves(
        ) -> None:
    """k from the operator's answer; a checkpoint's step (every rank says so), a step with
    a non-finite number and every step while a save is asked for are sent whatever k."""
    Cadenced.sent.clear()
    with serving(Cadenced) as url:
        reporter = Reporter(url=url, token="t")
        answers = {}
        for step in range(1, 15):
            answers[step] = reporter.report_step(
                step, {"loss": float("nan") if step == 6 else 1.0},
                checkpoint=step == 10)
    assert Cadenced.sent == [1, 4, 6, 8, 10, 12, 13, 14]
    #   1: k is 1 until the first answer; 6: NaN; 10: a checkpoint; 12 on: a save is asked
    assert answers[2] == answers[3] == {"skipped": True}
    assert reporter.every == 1 and reporter.save_request == {"reason": "Preemption"}


class EveryFourth(AskingEvery):
    every = 4
    sent: ClassVar[list[tuple[int, int]]] = []


def test_each_rank_sends_a_voted_step_its_phase_of_steps_later_and_flushes_before_urgent(
        ) -> None:
    """With k = 4, rank r sends its report of step 4n at step 4n + r % 4: the gang's reports
    of a voted step arrive over the 4 steps to the next, a quarter of the ranks a step. A
    checkpoint's step is sent at once, after what the rank still held (so that the older
    step's vote completes first); flush() sends what is held when training ends."""
    EveryFourth.sent.clear()
    calls: dict[int, list[tuple[int, list[tuple[int, int]]]]] = {}
    with serving(EveryFourth) as url:
        reporters = [Reporter(url=url, token="t") for _ in range(8)]
        for rank, reporter in enumerate(reporters):
            reporter.rank = rank
        for step in range(1, 12):  # the ranks step together, as their collectives make them
            for rank, reporter in enumerate(reporters):
                before = len(EveryFourth.sent)
                reporter.report_step(step, {"loss": 1.0}, checkpoint=step == 10)
                calls.setdefault(rank, []).append((step, EveryFourth.sent[before:]))
        held = {rank: [at for at, _ in r.deferred] for rank, r in enumerate(reporters)}
        for reporter in reporters:
            reporter.flush()
    sent_at = {rank: {step: [s for _, s in got] for step, got in steps if got}
               for rank, steps in calls.items()}
    # step 1: k is 1 until the first answer. Then step 4 at 4 + rank % 4; step 8 likewise,
    # except that rank 3 still holds 8 at step 10 (a checkpoint) and sends it first
    assert sent_at[0] == {1: [1], 4: [4], 8: [8], 10: [10]}
    assert sent_at[1] == {1: [1], 5: [4], 9: [8], 10: [10]}
    assert sent_at[2] == {1: [1], 6: [4], 10: [8, 10]}
    assert sent_at[3] == {1: [1], 7: [4], 10: [8, 10]}
    assert sent_at[5] == sent_at[1] and sent_at[7] == sent_at[3], "phase = rank % k"
    per_step = [sum(1 for r in sent_at.values() for s in r if s == step) for step in (4, 5, 6, 7)]
    assert per_step == [2, 2, 2, 2], "a quarter of the 8 ranks a step, not all at step 4"
    # at the end the ranks still hold no step 12 (not reached); flush sends nothing new
    assert held == {rank: [] for rank in range(8)}
    assert sorted(s for _, s in EveryFourth.sent).count(8) == 8, "every rank's vote of 8"


class Holding(Handler):
    """An operator that holds each step report until `release` is set (a slow leader, a
    hand-over) and asks for every 2nd step; a checkpoint commit is answered at once."""

    steps: ClassVar[list[int]] = []
    received: ClassVar[threading.Event] = threading.Event()
    release: ClassVar[threading.Event] = threading.Event()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.endswith("/checkpoint"):
            self.answer(200, {"accepted": True})
            return
        self.steps.append(body["step"])
        self.received.set()
        if not self.release.wait(timeout=30):  # a client that waited for it never gets here
            self.answer(504, {"error": "held too long"})
            return
        self.answer(200, {"accepted": True, "every": 2})


@pytest.fixture
def holding() -> Iterator[str]:
    Holding.steps, Holding.received, Holding.release = [], threading.Event(), threading.Event()
    with serving(Holding, threaded=True) as url:
        yield url
        Holding.release.set()


def test_a_background_reporter_returns_while_the_operator_still_holds_the_report(
        holding: str) -> None:
    """The step goes on: report_step returns while the operator has not answered; k from
    the answer applies once it arrives; flush waits for what is queued."""
    reporter = Reporter(url=holding, token="t", background=True)
    assert reporter.report_step(1) == {"queued": True}
    assert Holding.received.wait(timeout=30), "the operator has the report"
    assert not Holding.release.is_set()  # ... and has not answered it: the step went on
    assert reporter.report_step(2) == {"queued": True}, "k is still 1: no answer yet"
    Holding.release.set()
    reporter.flush()
    assert Holding.steps == [1, 2] and reporter.every == 2
    assert reporter.report_step(3) == {"skipped": True}


def test_a_checkpoint_commit_is_not_held_behind_a_step_report_in_flight(holding: str
                                                                        ) -> None:
    """The caller's commit and the background sender's step each have a connection."""
    reporter = Reporter(url=holding, token="t", background=True)
    reporter.report_step(1)
    assert Holding.received.wait(timeout=30)
    assert reporter.commit_checkpoint(1, "/ckpt/step-1") == {"accepted": True}
    assert not Holding.release.is_set()
    Holding.release.set()
    reporter.flush()
    assert Holding.steps == [1]


def test_while_the_operator_is_stuck_the_oldest_step_sends_go_and_the_newest_stay(
        holding: str) -> None:
    reporter = Reporter(url=holding, token="t", background=True)
    reporter.report_step(1)
    assert Holding.received.wait(timeout=30), "step 1 in flight"
    last = QUEUED + 6
    for step in range(2, last + 1):  # k is 1 until the held answer comes
        assert reporter.report_step(step) == {"queued": True}
    Holding.release.set()
    reporter.flush()
    assert reporter.dropped == 5
    assert Holding.steps == [1, *range(7, last + 1)], "steps 2-6 went, the newest stayed"


def test_a_background_send_s_failure_is_raised_once_by_the_next_call(server: str) -> None:
    Scripted.answers = [403, 200]
    reporter = Reporter(url=server, token="t", background=True)
    assert reporter.report_step(1) == {"queued": True}
    with pytest.raises(ReportError) as err:
        reporter.flush()
    assert err.value.status == 403
    assert reporter.report_step(2) == {"queued": True}
    reporter.flush()
    assert len(Scripted.seen) == 2


def test_a_send_s_own_failure_is_never_raised_by_the_call_that_queued_it(server: str) -> None:
    """The sender may fail on a step before the call that queued it returns (CI saw it once):
    that call still says queued, and the next call raises the failure."""

    class SenderFirst(Reporter):
        def _enqueue(self, bodies: list[dict[str, Any]]) -> None:
            super()._enqueue(bodies)
            with self._ready:  # the caller is slow: the sender is done before it returns
                self._ready.wait_for(lambda: not self._queue and not self._sending, 30)

    Scripted.answers = [403, 200]
    reporter = SenderFirst(url=server, token="t", background=True)
    assert reporter.report_step(1) == {"queued": True}
    with pytest.raises(ReportError) as err:
        reporter.report_step(2)
    assert err.value.status == 403
    reporter.flush()
    assert len(Scripted.seen) == 2, "step 2 was queued and sent although its call raised"
