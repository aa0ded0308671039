"""The loop's lanes: while a pass applies the endpoints' writes, an urgent change or a
timer running out has the groups and jobs decided and applied again at once; nothing
else does. Which changes are urgent, and what keeps a lane's API calls short (the
endpoints' pod writes bounded and paused, a group's events off its path)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.controllers.state import State
from goodput_operator.operator import loop
from goodput_operator.times import millis
from tests.unit.world import NOW, group_spec, nodes

pytestmark = pytest.mark.unit


def run_lanes(monkeypatch: pytest.MonkeyPatch, during: Any, endpoint_seconds: float = 0.3
              ) -> tuple[int, list[str]]:
    """Run `loop._lanes` beside an endpoint stage of ENDPOINT_SECONDS; DURING(state) acts
    0.05 s into it. Returns the lanes counted and the stages that ran, in order."""
    ran: list[str] = []

    async def groups(state: State, kube: Any, now: float) -> asyncio.Future[Any]:
        assert not state.bulk_open.is_set(), "the endpoints' pod writes wait meanwhile"
        ran.append("groups")
        return asyncio.ensure_future(asyncio.sleep(0))

    async def jobs(state: State, kube: Any, now: float) -> int:
        ran.append("jobs")
        return 0

    monkeypatch.setattr(loop.ultraservergroup, "reconcile_groups", groups)
    monkeypatch.setattr(loop.trainingjob, "reconcile_jobs", jobs)

    async def scenario() -> int:
        state = State()

        async def endpoints() -> None:
            await asyncio.sleep(0.05)
            during(state)
            await asyncio.sleep(endpoint_seconds)
            ran.append("endpoints done")

        return await loop._lanes(state, None, asyncio.create_task(endpoints()))  # type: ignore[arg-type]

    return asyncio.run(scenario()), ran


@pytest.mark.parametrize(("what", "during", "lanes"), [
    ("nothing happens", lambda s: None, 0),
    ("a plain wake (an endpoint pod became ready)", lambda s: s.wake.set(), 0),
    ("an urgent change", lambda s: s.wake_urgently(), 1),
    ("a timer that runs out", lambda s: s.wake_at(time.time() + 0.05), 1),
    ("a timer that runs out after the stage", lambda s: s.wake_at(time.time() + 60), 0),
])
def test_groups_and_jobs_run_again_only_for_what_cannot_wait(
        monkeypatch: pytest.MonkeyPatch, what: str, during: Any, lanes: int) -> None:
    counted, ran = run_lanes(monkeypatch, during)
    assert counted == lanes, what
    assert ran == ["groups", "jobs"] * lanes + ["endpoints done"], what


def test_a_burst_of_urgent_changes_during_one_lane_is_one_more_lane(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def burst(state: State) -> None:
        for _ in range(50):
            state.wake_urgently()

    counted, _ = run_lanes(monkeypatch, burst)
    assert counted == 1


def node(name: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"zone": "a"}},
            "status": {"conditions": [{"type": "Ready", "status": "True",
                                       "lastHeartbeatTime": extra.get("beat", "t0")}]},
            "spec": {"taints": extra.get("taints", [])}}


def pod(name: str, label: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "labels": {label: "owner"},
                         "resourceVersion": "1"},
            "spec": {"containers": []}, "status": {"phase": phase}}


@pytest.mark.parametrize(("what", "change", "urgent"), [
    ("a node's taint", lambda s: s.upsert_node(node("n", taints=[
        {"key": "k", "effect": "NoSchedule"}])), True),
    ("a node's heartbeat", lambda s: s.upsert_node(node("n", beat="t1")), False),
    ("a node leaving", lambda s: s.remove_node("n"), True),
    ("a worker running", lambda s: s.upsert_pod(pod("w", names.JOB_LABEL)), False),
    ("a worker failing", lambda s: s.upsert_pod(pod("w", names.JOB_LABEL, "Failed")), True),
    ("a worker deleted", lambda s: (s.upsert_pod(pod("w", names.JOB_LABEL)), s.urgent.clear(),
                                    s.remove_pod(pod("w", names.JOB_LABEL))), True),
    ("an endpoint's pod failing", lambda s: s.upsert_pod(pod("r", names.ENDPOINT_LABEL,
                                                             "Failed")), False),
    ("a new job", lambda s: s.upsert_job({"metadata": {"name": "j", "namespace": "ns",
                                                       "resourceVersion": "3"}}), True),
    ("a job deleted", lambda s: s.remove_job("ns", "j"), True),
])
def test_which_changes_are_urgent(what: str, change: Any, urgent: bool) -> None:
    state = State()
    state.upsert_node(node("n"))
    state.wake.clear()
    state.urgent.clear()
    change(state)
    assert state.urgent.is_set() == urgent, what


def test_the_endpoints_bulk_writes_are_bounded_and_wait_while_a_lane_runs() -> None:
    """At most BULK_WRITES in flight (the API threads never all queue behind a rollout);
    none starts while the gate is shut, and all go once it opens again."""
    from goodput_operator.controllers.kube import BULK_WRITES

    in_flight, most, started = 0, 0, []
    lock = threading.Lock()

    def write(index: int) -> int:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
            started.append(index)
        time.sleep(0.01)
        with lock:
            in_flight -= 1
        return index

    async def scenario() -> list[int]:
        state = State()
        state.bulk_open.clear()
        writes = asyncio.gather(*(state.bulk(write, i) for i in range(3 * BULK_WRITES)))
        await asyncio.sleep(0.1)
        assert started == [], "nothing starts while the gate is shut"
        state.bulk_open.set()
        return list(await writes)

    assert asyncio.run(scenario()) == list(range(3 * BULK_WRITES))
    assert 1 < most <= BULK_WRITES


def test_while_the_api_server_is_slow_fewer_bulk_writes_are_in_flight() -> None:
    """Every write slower than the limit's threshold: after the first round, the writes
    in flight fall to half and on to the floor (controllers.pacing); all still land."""
    from goodput_operator.controllers.kube import BULK_WRITES
    from goodput_operator.controllers.pacing import FLOOR, WriteLimit

    in_flight, peaks = 0, []
    lock = threading.Lock()
    first_round = threading.Event()  # set once BULK_WRITES writes are in flight at once

    def slow_write(index: int) -> int:
        nonlocal in_flight
        with lock:
            in_flight += 1
            peaks.append(in_flight)
            if in_flight == BULK_WRITES:
                first_round.set()
        if index < BULK_WRITES:  # the first round waits for all of it to be in flight: on a
            first_round.wait(5)  # busy machine 16 threads took longer to start than 0.1 s
        time.sleep(0.1)  # slower than the threshold below
        with lock:
            in_flight -= 1
        return index

    async def scenario() -> list[int]:
        state = State()
        state.bulk_limit = WriteLimit(BULK_WRITES)
        state.bulk_limit.quickest = 0.005  # an idle server's pace: 0.1 s is 20 times it
        return list(await asyncio.gather(*(state.bulk(slow_write, i)
                                           for i in range(3 * BULK_WRITES))))

    # 16 at once, then halved round by round, and the last ones at the floor
    assert asyncio.run(scenario()) == list(range(3 * BULK_WRITES))
    assert max(peaks[:BULK_WRITES]) == BULK_WRITES  # the first round: all at once
    assert max(peaks[-BULK_WRITES:]) <= FLOOR  # by the end: the floor


def test_the_bulk_writes_leave_the_api_threads_free_for_a_lane() -> None:
    """Every bulk thread busy with a slow write: a lane's call (asyncio.to_thread, the
    API threads) still runs at once."""
    from goodput_operator.controllers.kube import BULK_WRITES

    release = threading.Event()

    def slow_write() -> str:
        release.wait(5)
        return threading.current_thread().name

    async def scenario() -> tuple[str, list[str]]:
        state = State()
        writes = asyncio.gather(*(state.bulk(slow_write) for _ in range(BULK_WRITES)))
        await asyncio.sleep(0.05)
        lane = await asyncio.wait_for(asyncio.to_thread(
            lambda: threading.current_thread().name), 1.0)
        release.set()
        return lane, list(await writes)

    lane, bulk = asyncio.run(scenario())
    assert not lane.startswith("bulk")
    assert all(name.startswith("bulk") for name in bulk)


def test_a_group_s_events_are_posted_in_the_background_and_a_failure_is_only_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    from goodput_operator.controllers.ultraservergroup import _posting, post_events
    from goodput_operator.decide import Event

    posted: list[str] = []

    class Api:
        def event(self, obj: Any, reason: str, message: str, type_: str) -> None:
            if reason == "Broken":
                raise RuntimeError("connection reset")
            posted.append(f"{obj['metadata']['name']}: {reason}")

    async def scenario() -> None:
        node, group = {"metadata": {"name": "n1"}}, {"metadata": {"name": "g"}}
        post_events(Api(), [(node, Event("Warning", "Quarantined", "m")),  # type: ignore[arg-type]
                            (group, Event("Warning", "NodeQuarantined", "m"))])
        post_events(Api(), [(group, Event("Normal", "Broken", "m"))])  # type: ignore[arg-type]
        assert len(_posting) == 2, "on their way; the caller did not wait"
        while _posting:
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert sorted(posted) == ["g: NodeQuarantined", "n1: Quarantined"]
    assert "could not post events: connection reset" in caplog.text


def test_the_jobs_are_decided_while_the_groups_status_writes_are_on_their_way(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A group's status write (over a second on a busy API server) does not hold up the
    jobs: they are decided and applied meanwhile, and the pass waits for the write before
    it ends."""
    release, ran = threading.Event(), []

    class SlowStatusKube:
        def patch_status(self, *args: Any) -> str:
            ran.append("group status written" if release.wait(5) else "timed out")
            return "7"

        def event(self, *args: Any) -> None:
            return None

        def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
            body = nodes(1)[name]  # the group's label on its members
            body["metadata"]["labels"].update(patch["metadata"]["labels"])
            return body

    async def jobs(state: State, kube: Any, now: float) -> int:
        ran.append("jobs")
        release.set()
        return 0

    monkeypatch.setattr(loop.trainingjob, "reconcile_jobs", jobs)
    state = State()
    for body in nodes(1).values():
        state.upsert_node(body)
    state.upsert_group({"metadata": {"name": "trn2", "creationTimestamp": millis(NOW - 60)},
                        "spec": group_spec().model_dump(by_alias=True)})
    asyncio.run(loop.groups_then_jobs(state, SlowStatusKube()))  # type: ignore[arg-type]
    assert ran == ["jobs", "group status written"]
    assert "trn2" in state.group_written


def test_members_are_labelled_in_the_background_a_few_at_a_time_never_asked_twice() -> None:
    """The groups stage does not wait for its members' goodput.dev labels (for kubectl:
    20,000 new nodes held every pass 6-11 s): LABEL_CONCURRENCY writers drain what the
    last pass asked for, and a node being written is not asked for again meanwhile."""
    from goodput_operator.controllers import ultraservergroup

    bodies = nodes(10)  # 40 members, none labelled yet
    release, in_flight, most, patched = threading.Event(), [0], [0], []
    lock = threading.Lock()

    class SlowKube:
        def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
            with lock:
                in_flight[0] += 1
                most[0] = max(most[0], in_flight[0])
            release.wait(5)
            with lock:
                in_flight[0] -= 1
                patched.append(name)
            body = bodies[name]
            body["metadata"]["labels"].update(patch["metadata"]["labels"])
            return body

    async def scenario() -> State:
        state = State()
        for body in bodies.values():
            state.upsert_node(body)
        wanted = [(name, {names.GROUP_LABEL: "trn2"}) for name in bodies]
        ultraservergroup.label_nodes(state, SlowKube(), wanted)  # type: ignore[arg-type]
        await asyncio.sleep(0.2)  # the pass goes on; the writers wait on the API
        assert len(state.labels_writing) == ultraservergroup.LABEL_CONCURRENCY
        ultraservergroup.label_nodes(state, SlowKube(), wanted)  # the next pass asks again
        assert not state.labels_writing & set(state.labels_wanted), "never asked twice"
        assert len(state.labels_wanted) == 40 - ultraservergroup.LABEL_CONCURRENCY
        release.set()
        while state.labelers:
            await asyncio.sleep(0.01)
        return state

    state = asyncio.run(scenario())
    assert sorted(patched) == sorted(bodies), "each member labelled once"
    assert most[0] == ultraservergroup.LABEL_CONCURRENCY
    assert all(state.nodes[n]["metadata"]["labels"].get(names.GROUP_LABEL) == "trn2"
               for n in bodies)


@pytest.mark.parametrize("steps", [0, 1, 2, 3])
def test_a_stop_is_never_lost_while_the_loop_waits_for_a_wake(steps: int) -> None:
    """At scale the wake is set again by the end of nearly every pass. Python 3.11's
    asyncio.wait_for, cancelled in the steps after its awaited future finished, returned
    normally: the shutdown's cancellation was lost and the operator never stopped."""
    async def stopped() -> bool:
        state = State()
        state.wake.set()
        waiting = asyncio.create_task(loop.woken_or(state, 5.0))
        for _ in range(steps):
            await asyncio.sleep(0)
        waiting.cancel()
        try:
            await waiting
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(stopped())


def test_the_wait_ends_on_a_wake_or_at_its_timeout() -> None:
    async def waited() -> tuple[float, float]:
        state = State()
        started = time.monotonic()
        await loop.woken_or(state, 0.05)  # nothing wakes it
        timed_out = time.monotonic() - started
        asyncio.get_running_loop().call_later(0.01, state.wake.set)
        started = time.monotonic()
        await loop.woken_or(state, 30.0)
        return timed_out, time.monotonic() - started

    timed_out, woken = asyncio.run(waited())
    assert timed_out >= 0.05 and woken < 30.0
