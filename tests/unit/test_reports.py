"""What the report handlers make of workers' numbers before they reach the API server."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import socket
import threading
import urllib.error
import urllib.request

import pytest

from goodput_operator import names
from goodput_operator.api.reports import StepReport
from goodput_operator.api.trainingjob import Progress
from goodput_operator.controllers.state import State
from goodput_operator.operator import tokens as tokens_module
from goodput_operator.operator.reports import (
    ReportServer,
    inside,
    progress_of,
    save_request,
    step_answer,
)
from goodput_operator.operator.tokens import (
    POD_NAME,
    POD_UID,
    REVIEW_TTL,
    STALE_SECONDS,
    Buckets,
    Refused,
    TokenGate,
    precheck,
    remember,
)

pytestmark = pytest.mark.unit
NOW = 1_800_000_000.0


@pytest.mark.parametrize(("reported", "metrics", "non_finite"), [
    ({"loss": 2.5, "tokensPerSecond": 1e6}, {"loss": 2.5, "tokensPerSecond": 1e6}, None),
    ({"loss": math.nan, "lr": 3e-4}, {"lr": 3e-4}, {"loss": "NaN"}),
    ({"loss": math.inf, "gradNorm": -math.inf}, {}, {"loss": "+Inf", "gradNorm": "-Inf"}),
    ({}, {}, None),
])
def test_step_progress_keeps_non_finite_numbers_by_name_in_valid_json(
        reported: dict[str, float], metrics: dict[str, float],
        non_finite: dict[str, str] | None) -> None:
    report = StepReport.model_validate_json(json.dumps({"step": 7, "metrics": reported}))
    progress = progress_of(report, 3, NOW)
    json.dumps(progress, allow_nan=False)  # what the API server would refuse, it never gets
    assert progress["metrics"] == metrics and progress.get("nonFinite") == non_finite
    assert progress["step"] == 7 and progress["rank"] == 3
    Progress.model_validate(progress)  # the status schema takes it


@pytest.mark.parametrize(("path", "root", "accepted"), [
    ("/fsx/llama/step-100", "/fsx/llama", True),
    ("/fsx/llama", "/fsx/llama/", True),
    ("/fsx/llama-other/step-1", "/fsx/llama", False),      # a sibling sharing the prefix
    ("/fsx/llama/../other/step-1", "/fsx/llama", False),   # climbing out
    ("/etc/passwd", "/fsx/llama", False),
    ("s3://bucket/run-1/step-5", "s3://bucket/run-1", True),
    ("s3://bucket/run-10/step-5", "s3://bucket/run-1", False),
    ("gs://bucket/run-1/step-5", "s3://bucket/run-1", False),  # another scheme
    ("s3://bucket/run-1/step-5", "/bucket/run-1", False),      # a URI under a local dir
])
def test_a_checkpoint_is_accepted_only_inside_the_jobs_directory(
        path: str, root: str, accepted: bool) -> None:
    assert inside(path, root) is accepted


def jwt(**claims: object) -> str:
    """An unsigned token with these claims (what precheck reads; signatures are the
    TokenReview's business)."""
    def part(data: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")
    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


BOUND = {"pod": {"name": "j-r0-w0", "uid": "u"}, "namespace": "ns"}


@pytest.mark.parametrize(("token", "why"), [
    (jwt(aud=[names.REPORT_AUDIENCE], exp=NOW + 60, **{"kubernetes.io": BOUND}), None),
    (jwt(aud=names.REPORT_AUDIENCE, exp=NOW + 60, **{"kubernetes.io": BOUND}), None),
    ("not-a-token", "not a JWT"),
    ("a.%%%.c", "not a JWT"),
    (jwt(aud=["https://kubernetes.default.svc"], exp=NOW + 60, **{"kubernetes.io": BOUND}),
     f"not a token for audience {names.REPORT_AUDIENCE}"),
    (jwt(aud=[names.REPORT_AUDIENCE], exp=NOW - 1, **{"kubernetes.io": BOUND}), "expired"),
    (jwt(aud=[names.REPORT_AUDIENCE], exp="tomorrow", **{"kubernetes.io": BOUND}), "expired"),
    (jwt(aud=[names.REPORT_AUDIENCE], exp=NOW + 60), "not bound to a pod"),
])
def test_tokens_its_claims_rule_out_never_cost_a_token_review(token: str,
                                                              why: str | None) -> None:
    assert precheck(token, NOW) == why


def test_new_tokens_from_one_source_are_rate_limited_and_others_are_not() -> None:
    buckets = Buckets(rate=5, burst=20)
    assert sum(buckets.take("10.0.0.9", NOW) for _ in range(100)) == 20  # the burst
    assert buckets.take("10.0.0.7", NOW)                                 # another source
    assert sum(buckets.take("10.0.0.9", NOW + 1) for _ in range(100)) == 5  # a second on


def test_a_step_answer_asks_for_a_checkpoint_only_while_preempted_or_noticed() -> None:
    preemption = {"by": "ns/high", "at": "2027-01-15T08:00:00Z",
                  "deadline": "2027-01-15T08:02:00Z"}
    assert save_request({"status": {"phase": "Running"}}) == {}
    assert save_request({"status": {"preemption": preemption}}) == {"save": {
        "reason": "Preemption", "by": "ns/high", "deadline": "2027-01-15T08:02:00Z"}}
    notice = {"node": "n1", "kind": "SpotInterruption", "since": "2027-01-15T08:00:00Z",
              "deadline": "2027-01-15T08:02:00Z"}  # a node of the gang about to go
    assert save_request({"status": {"notice": notice}}) == {"save": {
        "reason": "SpotInterruption", "by": "node/n1", "deadline": "2027-01-15T08:02:00Z"}}


def test_a_step_answer_says_how_often_to_report_and_every_step_while_a_save_is_asked() -> None:
    """The vote of the step a preempted job saves at must happen: while a save is asked
    for, the answer asks for every step whatever the job's k."""
    running = {"status": {"phase": "Running"}}
    preempted = {"status": {"preemption": {"by": "ns/high", "deadline": "soon"}}}
    assert step_answer({"accepted": True}, running, 16) == {"accepted": True, "every": 16}
    assert step_answer({"accepted": True}, preempted, 16)["every"] == 1
    assert step_answer({"accepted": True}, preempted, 16)["save"]["by"] == "ns/high"


class Reviewer:
    """What TokenGate asks of the API server: a TokenReview, counted (any well-formed
    token is authenticated, as the real user with extra fields the API server adds)."""

    def __init__(self) -> None:
        self.reviewed: list[str] = []
        self.answer: str = "authenticated"  # or "rejected", or "away" (an error)

    def review_token(self, token: str, audiences: list[str]) -> dict[str, object]:
        self.reviewed.append(token)
        if self.answer == "away":
            raise ConnectionError("the API server is away")
        if self.answer == "rejected":
            return {"authenticated": False, "error": "service account deleted"}
        return {"authenticated": True, "audiences": audiences, "user": {
            "username": "system:serviceaccount:ns:default", "uid": "sa-uid",
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "extra": {POD_NAME: ["j-r0-w0"], POD_UID: ["u"],
                      "authentication.kubernetes.io/credential-id": ["JTI=x"]}}}


def gate(reviewer: Reviewer) -> TokenGate:
    made = TokenGate(reviewer)  # type: ignore[arg-type]
    made.buckets = Buckets(rate=1e9, burst=1e9)  # not what these tests are about
    return made


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The gate's clocks, moved by the test: monotonic seconds from 1000, wall time from
    NOW."""
    now = [1000.0]
    monkeypatch.setattr(tokens_module.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(tokens_module.time, "time", lambda: NOW + now[0] - 1000.0)
    return now


def test_an_accepted_token_is_trusted_until_its_ttl_or_its_own_expiry_whichever_is_first(
        clock: list[float]) -> None:
    reviewer = Reviewer()
    tokens = gate(reviewer)
    long_lived = jwt(aud=[names.REPORT_AUDIENCE], exp=NOW + 3600, **{"kubernetes.io": BOUND})
    short_lived = jwt(aud=[names.REPORT_AUDIENCE], exp=NOW + 20, **{"kubernetes.io": BOUND})
    for token in (long_lived, short_lived):
        asyncio.run(tokens.review(token, "10.0.0.9"))
    clock[0] += 0.75 * REVIEW_TTL - 1  # the earliest any accepted review may lapse
    kept = asyncio.run(tokens.review(long_lived, "10.0.0.9"))
    assert reviewer.reviewed == [long_lived, short_lived], "trusted from memory"
    assert kept["user"] == {"username": "system:serviceaccount:ns:default",
                            "extra": {POD_NAME: ["j-r0-w0"], POD_UID: ["u"]}}, \
        "only what binds it to its pod is kept"
    with pytest.raises(Refused, match="expired"):  # its own expiry came first
        asyncio.run(tokens.review(short_lived, "10.0.0.9"))
    clock[0] += REVIEW_TTL / 4 + 1

    async def lapsed() -> None:
        await tokens.review(long_lived, "10.0.0.9")
        await tokens.renewed()
    asyncio.run(lapsed())
    assert reviewer.reviewed[-1] == long_lived, "asked again after the TTL"
    tokens.close()


@pytest.mark.parametrize(("answer", "then"), [
    ("authenticated", "trusted anew"),
    ("rejected", "refused"),
    ("away", "answered by the lapsed review until STALE_SECONDS, then 503"),
])
def test_a_lapsed_review_answers_the_report_while_the_token_is_reviewed_again(
        answer: str, then: str, clock: list[float]) -> None:
    """Past its trust, a token's report does not wait for a TokenReview: the lapsed review
    answers it and the token is reviewed again off the report's path, with what that finds
    holding for its later reports."""
    reviewer = Reviewer()
    tokens = gate(reviewer)
    token = jwt(aud=[names.REPORT_AUDIENCE], exp=NOW + 3600, **{"kubernetes.io": BOUND})

    async def scenario() -> list[str]:
        await tokens.review(token, "10.0.0.9")
        clock[0] += REVIEW_TTL + 1
        reviewer.answer = answer
        assert (await tokens.review(token, "10.0.0.9"))["authenticated"]
        assert len(reviewer.reviewed) == 1, "the report did not wait for the review"
        await tokens.renewed()
        assert len(reviewer.reviewed) == 2, "reviewed again, once"
        outcomes = []
        for later in (1.0, STALE_SECONDS):
            clock[0] += later
            try:
                await tokens.review(token, "10.0.0.9")
                outcomes.append("200")
            except Refused as err:
                outcomes.append(str(err.status))
            await tokens.renewed()
        return outcomes

    outcomes = asyncio.run(scenario())
    tokens.close()
    assert outcomes == {"authenticated": ["200", "200"], "rejected": ["401", "401"],
                        "away": ["200", "503"]}[answer], then


def test_a_full_memory_of_tokens_forgets_the_lapsed_ones_and_keeps_the_live_ones() -> None:
    """A gang of tens of thousands of workers must not make the gate forget every token
    each time it fills (each forgetting cost a TokenReview per worker)."""
    reviews: dict[str, tuple[float, dict[str, object]]] = {}
    for i in range(10):
        remember(reviews, f"lapsed-{i}", (5.0, {}), limit=20, now=10.0)
    for i in range(10):
        remember(reviews, f"live-{i}", (50.0, {}), limit=20, now=10.0)
    remember(reviews, "new", (50.0, {}), limit=20, now=10.0)
    assert sorted(reviews) == sorted([*(f"live-{i}" for i in range(10)), "new"])


def test_reports_are_answered_while_the_operators_loop_is_busy_and_wake_it_on_its_own_loop(
        ) -> None:
    """The report server runs on a thread of its own: a worker is answered while a long
    pass holds the operator's loop (here: the loop waits, without yielding, for the
    answer), and what a report wakes is set on the operator's loop, not the server's."""
    state = State()

    async def scenario() -> tuple[bool, list[int], bool]:
        server = ReportServer(state, Reviewer())  # type: ignore[arg-type]
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        await server.start(port, host="127.0.0.1")
        answered, statuses = threading.Event(), []

        def post() -> None:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/reports/step", data=b"{}", method="POST")
            try:
                urllib.request.urlopen(request, timeout=30)
            except urllib.error.HTTPError as err:
                statuses.append(err.code)
            answered.set()

        threading.Thread(target=post).start()
        while_busy = answered.wait(timeout=30)  # blocks this loop, as a long pass does
        waker = threading.Thread(target=server._wake, kwargs={"urgent": True})
        waker.start()
        waker.join()
        woken = await asyncio.wait_for(state.urgent.wait(), timeout=30)
        await server.stop()
        return while_busy, statuses, woken and state.wake.is_set()

    while_busy, statuses, woken = asyncio.run(scenario())
    assert while_busy and statuses == [401]  # no bearer token: refused, but answered
    assert woken


def test_progress_is_the_newest_step_and_a_late_report_of_an_older_one_does_not_replace_it(
        ) -> None:
    """With k = 4 rank 3 sends its report of step 4 three steps late (sdk.spread_phase): it
    may arrive after rank 0's report of step 8, and status.progress stays at step 8."""
    state = State()
    server = ReportServer(state, Reviewer())  # type: ignore[arg-type]
    job = {"metadata": {"namespace": "ns", "name": "j"},
           "spec": {"ultraServerGroup": "g", "workers": 4, "acceleratorsPerWorker": 16,
                    "template": {"spec": {
               "containers": [{"name": "main", "image": "trainer:1"}]}}}}

    def pod(rank: int) -> dict[str, object]:
        return {"metadata": {"name": f"j-{rank}", "labels": {names.RANK_LABEL: str(rank)}},
                "spec": {"nodeName": f"node-{rank}"}}

    async def report(rank: int, step: int) -> None:
        await server._step(job, pod(rank), StepReport.model_validate({"step": step}))

    async def scenario() -> list[tuple[int, int]]:
        seen = []
        for rank, step in [(0, 4), (0, 8), (3, 4), (1, 8)]:
            await report(rank, step)
            progress = state.progress["ns", "j"]
            seen.append((progress["step"], progress["rank"]))
        return seen

    assert asyncio.run(scenario()) == [(4, 0), (8, 0), (8, 0), (8, 1)]


@pytest.mark.parametrize(("forgery", "status"), [
    ({}, None),                                                   # the operator's own worker
    ({"name": "j-r0-w1-copy"}, 403),                              # another name, same labels
    ({"node": "us1-n0"}, 403),                                    # bound to another's node
    ({"rank": "3"}, 403),                                         # a rank placement lacks
])
def test_a_report_counts_only_from_the_operators_pod_for_the_rank_on_its_placed_node(
        forgery: dict[str, str], status: int | None) -> None:
    """A tenant may create a pod with its own job as controller, a rank label and the
    current attempt, bound straight to another team's node (spec.nodeName): its reports
    are refused, so that node is never blamed (blame goes to the placement's node)."""
    from tests.unit.world import job, placed, worker
    body = job(status={"phase": "Running", "restarts": 0,
                       "placement": placed("us0-n0", "us0-n1")})
    rank = int(forgery.get("rank", "1"))
    pod = worker(body, min(rank, 1), node_name=forgery.get("node", "us0-n1"),
                 phase="Running", ready=True)
    pod["metadata"]["name"] = forgery.get("name", pod["metadata"]["name"])
    pod["metadata"]["labels"][names.RANK_LABEL] = str(rank)
    state = State()
    state.jobs[("ns", "j")] = body
    server = ReportServer(state, Reviewer())  # type: ignore[arg-type]
    if status is None:
        assert server._job_of(pod) is body
        return
    with pytest.raises(Refused) as refused:
        server._job_of(pod)
    assert refused.value.status == status and "is not the job's worker" in str(refused.value)
