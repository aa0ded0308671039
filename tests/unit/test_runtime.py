"""The process around the controllers: which pods are tracked, and what health means."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.controllers.state import State
from goodput_operator.operator.runtime import Health, cancelled, tracked_pod


def pod(labels: dict[str, str] | None = None, requests: dict[str, str] | None = None
        ) -> dict[str, Any]:
    return {"metadata": {"name": "p", "labels": labels or {}},
            "spec": {"containers": [{"resources": {"requests": requests or {}}}]}}


@pytest.mark.parametrize(("case", "body", "tracked"), [
    ("a TrainingJob worker", pod({names.JOB_LABEL: "j"}), True),
    ("an InferenceEndpoint replica", pod({names.ENDPOINT_LABEL: "e"}), True),
    ("anyone's pod that requests a device occupies a node",
     pod(requests={"nvidia.com/gpu": "8", "cpu": "1"}), True),
    ("a CPU-only pod of someone else", pod(requests={"cpu": "1", "memory": "1Gi"}), False),
    ("a pod without resources", {"metadata": {"name": "p"}, "spec": {}}, False),
])
def test_tracked_pods(case: str, body: dict[str, Any], tracked: bool) -> None:
    assert tracked_pod(body) is tracked, case


@pytest.mark.parametrize(("case", "leading", "last_pass", "live"), [
    ("a leader whose loop just passed", True, 990.0, True),
    ("a leader whose loop is wedged", True, 600.0, False),
    ("a standby runs no loop and is live", False, 0.0, True),
    ("a leader before its first pass", True, 0.0, True),
])
def test_liveness(case: str, leading: bool, last_pass: float, live: bool) -> None:
    state = State()
    state.primed, state.last_pass = True, last_pass
    health = Health(state, kube=None, leading=lambda: leading)  # type: ignore[arg-type]
    assert health.live(1000.0)[0] is live, case


def test_not_ready_before_the_initial_sync() -> None:
    health = Health(State(), kube=None)  # type: ignore[arg-type]
    assert asyncio.run(health.ready(1000.0)) == (False, "initial sync not finished")


def test_the_cache_keeps_of_a_pod_only_what_the_operator_reads() -> None:
    from goodput_operator.controllers.state import slim_pod

    body = {"metadata": {"name": "w0", "managedFields": [{"manager": "kubectl"}],
                         "labels": {names.JOB_LABEL: "j"}},
            "spec": {"nodeName": "n1", "schedulingGates": [{"name": "g"}],
                     "volumes": [{"name": "token"}],
                     "containers": [{"name": "main", "env": [{"name": "RANK", "value": "0"}],
                                     "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
            "status": {"phase": "Running"}}
    assert slim_pod(body) == {
        "metadata": {"name": "w0", "labels": {names.JOB_LABEL: "j"}},
        "spec": {"nodeName": "n1", "schedulingGates": [{"name": "g"}],
                 "containers": [{"name": "main",
                                 "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Running"}}


def test_a_pass_spends_its_write_budget_then_asks_for_another_pass() -> None:
    from goodput_operator.controllers.state import PASS_WRITE_BUDGET
    from goodput_operator.decide.creates import WriteBudget

    state, budget = State(), WriteBudget(PASS_WRITE_BUDGET)
    assert budget.spend(PASS_WRITE_BUDGET + 10), "one object may overdraw"
    assert not budget.spend(1)
    assert budget.deferred == 1
    assert not state.wake.is_set()
    state.defer_writes(budget.deferred)
    assert state.wake.is_set() and state.deferred_writes == 1


def test_every_cyclic_collection_is_timed_by_generation() -> None:
    import gc

    from goodput_operator import metrics
    from goodput_operator.operator import runtime

    full = metrics.GC_PAUSE_SECONDS.labels("2")
    before = sum(bucket.get() for bucket in full._buckets)  # type: ignore[attr-defined]
    runtime.time_collections()
    try:
        gc.collect()
        assert sum(bucket.get() for bucket in full._buckets) == before + 1  # type: ignore[attr-defined]
    finally:
        gc.callbacks.pop()


def test_a_trim_freezes_what_lives_and_a_thorough_one_still_finds_frozen_cycles() -> None:
    import gc
    import weakref

    from goodput_operator.operator import runtime

    class Node:
        other: Any = None

    cycle = Node()
    cycle.other = cycle  # cyclic: only the collector frees it
    alive = weakref.ref(cycle)
    try:
        runtime.release_freed_memory()
        assert gc.get_freeze_count() > 0, "what lives now is left out of full collections"
        del cycle
        gc.collect()
        assert alive() is not None, "frozen: a plain collection does not walk it"
        runtime.release_freed_memory(thorough=True)
        assert alive() is None, "a thorough trim unfreezes first and finds it"
    finally:
        gc.unfreeze()


def test_survivors_of_a_pass_are_frozen_and_young_cycles_are_collected_first() -> None:
    import gc
    import weakref

    from goodput_operator.operator import runtime

    class Node:
        other: Any = None

    cycle = Node()
    cycle.other = cycle
    gone = weakref.ref(cycle)
    del cycle  # garbage already: the young collection frees it before anything is frozen
    kept = Node()
    kept.other = kept
    alive = weakref.ref(kept)
    gc.unfreeze()
    try:
        runtime.freeze_survivors()
        assert gone() is None, "young cyclic garbage is not frozen"
        assert gc.get_freeze_count() > 0, "what survives is left out of full collections"
        del kept
        gc.collect()
        assert alive() is not None, "frozen: only a thorough trim finds it"
        runtime.release_freed_memory(thorough=True)
        assert alive() is None
    finally:
        gc.unfreeze()


def test_a_shutdown_cancels_again_until_the_loops_end(caplog: pytest.LogCaptureFixture) -> None:
    """One cancellation can be lost (Python 3.11's wait_for); a loop that lost it ends at
    the next one, and one that never ends is named and left behind after the bound."""
    async def stopped() -> tuple[list[str], bool, bool]:
        lost: list[str] = []
        holding = True

        async def loses_one() -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                lost.append("once")  # as if the cancellation had been swallowed
            await asyncio.sleep(30)

        async def stubborn() -> None:
            while holding:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(30)

        losing = asyncio.create_task(loses_one(), name="losing")
        holds = asyncio.create_task(stubborn(), name="stubborn")
        await asyncio.sleep(0)
        await cancelled([losing], seconds=5.0)
        await cancelled([holds], seconds=0.6)
        left_behind = not holds.done()
        holding = False
        holds.cancel()
        await asyncio.wait({holds})
        return lost, losing.cancelled(), left_behind

    with caplog.at_level("ERROR"):
        lost, ended, left_behind = asyncio.run(stopped())
    assert lost == ["once"] and ended and left_behind
    assert "stubborn did not stop within 1s" in caplog.text


def test_service_discovery_is_built_again_only_when_the_serving_pods_change(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """TENANCY.md rule 6: a GET loop on /sd/serving costs the loop nothing; a change is
    served within SD_SECONDS."""
    from goodput_operator.operator import runtime

    builds: list[int] = []
    monkeypatch.setattr(runtime, "scrape_targets",
                        lambda endpoints, pods: builds.append(1) or [{"targets": []}])
    clock = [100.0]
    monkeypatch.setattr(runtime.time, "monotonic", lambda: clock[0])
    state = State()
    health = Health(state, kube=None)  # type: ignore[arg-type]
    for _ in range(1000):
        asyncio.run(health._serving_targets(None))  # type: ignore[arg-type]
    assert len(builds) == 1
    state.serving_version += 1                      # a serving pod changed
    asyncio.run(health._serving_targets(None))  # type: ignore[arg-type]
    assert len(builds) == 1                          # within SD_SECONDS of the last build
    clock[0] += runtime.SD_SECONDS
    asyncio.run(health._serving_targets(None))  # type: ignore[arg-type]
    assert len(builds) == 2
