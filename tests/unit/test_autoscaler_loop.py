"""The autoscaler's loop: each endpoint is evaluated on its own schedule, so one whose
Prometheus never answers holds back no other endpoint, and is not started twice."""

from __future__ import annotations

import asyncio
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
