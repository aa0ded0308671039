"""The autoscaler's loop: each endpoint is evaluated on its own schedule, so one whose
Prometheus never answers holds back no other endpoint, and is not started twice."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from goodput_operator.controllers import inferenceendpoint
from goodput_operator.controllers.state import State
from tests.unit.test_decide_endpoint import endpoint

pytestmark = pytest.mark.unit
SCALING = {"minReplicas": 1, "maxReplicas": 4,
           "metrics": [{"type": "QueueDepth", "target": 10}]}


def test_a_stuck_endpoint_holds_back_no_other_and_is_not_started_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    state = State()
    for name in ("stuck", "quick"):
        state.endpoints[("ns", name)] = endpoint(name, scaling=SCALING)
    started: list[str] = []
    never = asyncio.Event()

    async def evaluate(state: State, ie: Any, *_: Any) -> None:
        name = ie["metadata"]["name"]
        started.append(name)
        if name == "stuck":
            await never.wait()          # a Prometheus that never answers

    monkeypatch.setattr(inferenceendpoint, "evaluate", evaluate)

    async def scenario() -> list[str]:
        loop = asyncio.create_task(inferenceendpoint.run_autoscaler(state, tick=0.01))
        try:
            while started.count("quick") < 5:
                await asyncio.sleep(0.01)
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
        return started

    seen = asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert seen.count("quick") >= 5 and seen.count("stuck") == 1


def test_a_decision_replaced_before_any_pass_wrote_it_is_still_recorded_from_the_shown_size(
        ) -> None:
    """Two evaluations before the next pass (a busy operator): the second starts from the
    first's size (1 -> 2, then 2 -> 2), yet the status has only ever shown 1, so the pass
    still records 1 -> 2."""
    from goodput_operator.autoscaling.algorithm import Decision
    from goodput_operator.decide.endpoint import record_scaling
    state, key = State(), ("ns", "rated", "")
    inferenceendpoint._record(state, key, Decision(2, "7 requests/s", {}), 1, 100.0)
    inferenceendpoint._record(state, key, Decision(2, "7 requests/s", {}), 2, 101.0)
    scaled = state.scaled[key]
    assert (scaled.decision.desired, scaled.current, scaled.at) == (2, 1, 101.0)
    found = record_scaling(scaled, {}, {}, "")
    assert found is not None and (found[0]["lastScaling"]["from"],
                                  found[0]["lastScaling"]["to"]) == (1, 2)
    written = dataclasses.replace(scaled, written=True)  # as the pass marks it
    state.scaled[key] = written
    inferenceendpoint._record(state, key, Decision(2, "7 requests/s", {}), 2, 102.0)
    assert state.scaled[key].current == 2  # from then on, from what the status shows
