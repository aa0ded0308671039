"""The watches' handling of one event: its place moves on, tracked pods and Lease renewals
reach the state, and an expired place (410) asks for a new list."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from goodput_operator.controllers.state import State
from goodput_operator.health.quarantine import Renewal
from goodput_operator.operator.watches import Expired, PodWatch

pytestmark = pytest.mark.unit


def pod(name: str, version: str, devices: int = 0) -> dict[str, Any]:
    quantity = {"example.com/device": str(devices)}
    resources = {"requests": quantity, "limits": quantity} if devices else {}
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": version},
            "spec": {"containers": [{"name": "c", "resources": resources}]}}


def watched() -> tuple[PodWatch, State, asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    state = State()
    return PodWatch(state, None, loop), state, loop  # type: ignore[arg-type]


def test_tracked_pods_reach_the_state_and_untracked_ones_do_not() -> None:
    watch, state, loop = watched()
    try:
        watch.apply({"type": "ADDED", "object": pod("gpu", "10", devices=1)})
        watch.apply({"type": "ADDED", "object": pod("web", "11")})
        watch.apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}})
        loop.run_until_complete(asyncio.sleep(0))  # the handed-over changes run
        assert list(state.pods) == ["ns/gpu"]
        assert watch.resource_version == "12"
        watch.apply({"type": "DELETED", "object": pod("gpu", "13", devices=1)})
        loop.run_until_complete(asyncio.sleep(0))
        assert not state.pods and watch.resource_version == "13"
    finally:
        loop.close()


@pytest.mark.parametrize(("event", "error"), [
    ({"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}},
     Expired),
    ({"type": "ERROR", "object": {"code": 500, "message": "internal"}}, RuntimeError),
])
def test_an_error_event_ends_the_request(event: dict[str, Any], error: type) -> None:
    watch, _, loop = watched()
    try:
        with pytest.raises(error):
            watch.apply(event)
    finally:
        loop.close()


def test_a_lease_event_hands_over_the_node_s_last_renewal() -> None:
    from goodput_operator.operator.watches import LeaseWatch

    loop = asyncio.new_event_loop()
    state = State()
    watch = LeaseWatch(state, None, loop)  # type: ignore[arg-type]
    try:
        for renewed in ("2027-01-15T08:00:00.000000Z", "2027-01-15T08:00:10.000000Z"):
            watch.apply({"type": "MODIFIED", "object": {
                "metadata": {"name": "n1", "resourceVersion": "5"},
                "spec": {"holderIdentity": "n1", "renewTime": renewed}}})
        watch.apply({"type": "ADDED", "object": {"metadata": {"name": "n2"}, "spec": {}}})
        loop.run_until_complete(asyncio.sleep(0))
        assert state.renewing == {"n1": Renewal(1_800_000_010.0, 10.0)}
        assert "n2" not in state.leases
        watch.apply({"type": "DELETED", "object": {"metadata": {"name": "n1"}}})
        loop.run_until_complete(asyncio.sleep(0))
        assert state.leases == {} and state.renewing == {}
    finally:
        loop.close()


def test_an_object_gone_since_the_pass_read_it_is_forgotten_and_the_others_go_on() -> None:
    """A deletion the watch never delivered (between the initial list and the watch's
    start) shows as a 404 on the status write: the state forgets the object instead of
    failing on it, and holding its nodes, every pass for ever."""
    from goodput_operator.controllers.kube import Gone, apply_each

    forgotten: list[str] = []
    applied: list[str] = []

    async def apply(name: str) -> None:
        if name == "deleted":
            raise Gone(f"ultraservergroups /{name}")
        applied.append(name)

    asyncio.run(apply_each("UltraServerGroup", ["deleted", "live"], apply,
                           lambda name: {"metadata": {"name": name}}, forgotten.append))
    assert (forgotten, applied) == (["deleted"], ["live"])
