"""Routing a multi-region endpoint's requests (autoscaling.routing, decide.traffic): each
region's weight from its ready replicas and the proxy's measurements, a failing or
saturated region drained at once, a healed one back only after a hold and in quarters,
and what the endpoint's status and events say."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from goodput_operator.api.inferenceendpoint import InferenceEndpointStatus
from goodput_operator.autoscaling.routing import (
    MAX_WEIGHT,
    Entry,
    ProxyView,
    Signal,
    Traffic,
    next_step,
    parse_stats,
    route,
)
from goodput_operator.decide import decide_endpoints, trial
from goodput_operator.decide.endpoint import EndpointDecision
from goodput_operator.times import millis
from tests.unit.test_decide_regions import child, parent
from tests.unit.world import NOW, conditions, world

pytestmark = pytest.mark.unit
HOLD = 60
UP = Entry(up=True, weight=1)


def up(response_ms: float = 0.0, queued: int = 0) -> Entry:
    return Entry(up=True, weight=1, queued=queued, response_ms=response_ms)


@dataclass(frozen=True)
class Case:
    name: str
    signals: list[Signal]
    weights: dict[str, int]
    traffic: dict[str, str]


CASES = [
    Case("shares follow the ready replicas",
         [Signal("a", 3, UP), Signal("b", 1, UP)], {"a": 256, "b": 85},
         {"a": "Serving", "b": "Serving"}),
    Case("a slower region gets less per replica: 10 ms against 50 ms, a third",
         [Signal("a", 2, up(10)), Signal("b", 2, up(50))], {"a": 256, "b": 85},
         {"a": "Serving", "b": "Serving"}),
    Case("a few milliseconds apart is noise, not a slower region",
         [Signal("a", 2, up(1)), Signal("b", 2, up(2))], {"a": 256, "b": 235},
         {"a": "Serving", "b": "Serving"}),
    Case("however slow, a region keeps a quarter of its share per replica",
         [Signal("a", 1, up(10)), Signal("b", 1, up(1000))], {"a": 256, "b": 64},
         {"a": "Serving", "b": "Serving"}),
    Case("no ready replica: drained", [Signal("a", 2, UP), Signal("b", 0, UP)],
         {"a": 256, "b": 0}, {"a": "Serving", "b": "Drained"}),
    Case("the proxy's health check finds its entry down: drained",
         [Signal("a", 2, UP), Signal("b", 4, Entry(up=False, weight=1))],
         {"a": 256, "b": 0}, {"a": "Serving", "b": "Drained"}),
    Case("requests queued for it while another has none: saturated, drained",
         [Signal("a", 2, up(queued=0)), Signal("b", 4, up(queued=7))],
         {"a": 256, "b": 0}, {"a": "Serving", "b": "Drained"}),
    Case("every region queueing: none is drained for it",
         [Signal("a", 2, up(queued=3)), Signal("b", 2, up(queued=7))],
         {"a": 256, "b": 256}, {"a": "Serving", "b": "Serving"}),
    Case("no server of its name in the backend: drained",
         [Signal("a", 2, UP), Signal("b", 2, None)], {"a": 256, "b": 0},
         {"a": "Serving", "b": "Drained"}),
    Case("everything drained: what can serve keeps its plain share",
         [Signal("a", 2, Entry(up=False, weight=1)), Signal("b", 0, UP)],
         {"a": 0, "b": 0}, {"a": "Drained", "b": "Drained"}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_regions_weight(case: Case) -> None:
    routes = route(case.signals, {}, NOW, HOLD)
    assert {r.name: r.weight for r in routes} == case.weights
    assert {r.name: r.traffic for r in routes} == case.traffic
    assert all(0 <= r.weight <= MAX_WEIGHT for r in routes)


def test_when_all_are_drained_those_that_can_serve_still_do() -> None:
    routes = route([Signal("a", 2, up(queued=1)), Signal("b", 2, None)],
                   {"a": ("Drained", NOW - 5)}, NOW, HOLD)
    by = {r.name: r for r in routes}
    assert by["b"].weight == 0
    # a returning region at 0 while b has no server: a serves anyway, said in its reason
    assert by["a"].weight == MAX_WEIGHT and "served anyway" in by["a"].reason


def test_a_healed_region_returns_after_the_hold_in_quarters() -> None:
    signals = [Signal("a", 2, UP), Signal("b", 2, UP)]
    states: dict[str, tuple[Traffic, float]] = {"b": ("Drained", NOW - 100)}
    seen: list[tuple[float, str, int]] = []
    for at in range(0, 2 * HOLD + 1, 5):
        routes = {r.name: r for r in route(signals, states, NOW + at, HOLD)}
        states = {n: (r.traffic, r.since) for n, r in routes.items()}
        seen.append((at, routes["b"].traffic, routes["b"].weight))
        assert routes["a"].weight == MAX_WEIGHT
    weights = {at: w for at, _, w in seen}
    assert weights[0] == weights[55] == 0  # held at nothing while it proves itself
    assert (weights[60], weights[75], weights[90], weights[105]) == (64, 128, 192, 256)
    assert seen[-1][1] == "Serving" and seen[0][1] == "Returning"
    assert [t for _, t, _ in seen].index("Serving") == 2 * HOLD // 5


def test_a_region_failing_again_while_returning_starts_over() -> None:
    returning = {"b": ("Returning", NOW - HOLD - 20)}
    [_, b] = route([Signal("a", 1, UP), Signal("b", 1, UP)], returning, NOW, HOLD)
    assert (b.traffic, b.weight) == ("Returning", 64 * 2)
    [_, b] = route([Signal("a", 1, UP), Signal("b", 0, UP)], returning, NOW, HOLD)
    assert (b.traffic, b.weight, b.since) == ("Drained", 0, NOW)
    [_, b] = route([Signal("a", 1, UP), Signal("b", 1, UP)], {"b": ("Drained", NOW)},
                   NOW + 1, HOLD)
    assert (b.traffic, b.weight, b.since) == ("Returning", 0, NOW + 1)


def test_the_next_step_of_a_returning_region() -> None:
    assert next_step(NOW, NOW + 1, HOLD) == NOW + HOLD
    assert next_step(NOW, NOW + HOLD, HOLD) == NOW + HOLD + HOLD / 4
    assert next_step(NOW, NOW + 2 * HOLD - 1, HOLD) == NOW + 2 * HOLD


def test_haproxy_show_stat_is_read_per_server() -> None:
    text = (Path(__file__).parent / "data" / "haproxy-2.6-show-stat.csv").read_text()
    entries = parse_stats(text)
    assert set(entries) == {("ns.chat", "region-a"), ("ns.chat", "region-b")}
    assert entries[("ns.chat", "region-a")] == Entry(up=False, weight=100)
    assert entries[("ns.chat", "region-b")].weight == 0


def routed_parent(status: dict[str, Any] | None = None) -> dict[str, Any]:
    ie = parent(status)
    return {**ie, "spec": {**ie["spec"], "multiRegion": {
        **ie["spec"]["multiRegion"], "trafficReturnSeconds": HOLD}}}


def decided(proxy: ProxyView, status: dict[str, Any] | None = None,
            east_ready: bool = True) -> EndpointDecision:
    children = [child(0, "east", east_ready, 0, "cluster-e"),
                child(1, "west", True, 2, "cluster-w"), child(2, "west", True, 1, "cluster-w")]
    snapshot = world(None, endpoints=[routed_parent(status)], delegated_endpoints=children,
                     kueue=True, proxy=proxy)
    with trial(snapshot):
        return decide_endpoints(snapshot, [])[0]


def test_the_manager_routes_by_weights_it_writes_into_the_status() -> None:
    proxy = ProxyView({("ns.llm", "east"): Entry(True, 1), ("ns.llm", "west"): Entry(True, 0),
                       ("other.llm", "east"): Entry(True, 7)})
    found = decided(proxy)
    InferenceEndpointStatus.model_validate(found.desired)
    regions = {r["name"]: r for r in found.desired["regions"]}
    assert (regions["east"]["trafficWeight"], regions["west"]["trafficWeight"]) == (128, 256)
    assert regions["east"]["traffic"] == "Serving"
    assert found.weights == [("ns.llm", "east", 128), ("ns.llm", "west", 256)]
    assert conditions(found.desired)["Routed"] == ("True", "WeightsSet")


def test_a_region_losing_its_replicas_is_drained_with_an_event() -> None:
    proxy = ProxyView({("ns.llm", "east"): Entry(True, 128),
                       ("ns.llm", "west"): Entry(True, 256)})
    found = decided(proxy, east_ready=False)
    east = {r["name"]: r for r in found.desired["regions"]}["east"]
    assert (east["traffic"], east["trafficWeight"]) == ("Drained", 0)
    assert east["trafficSince"] == millis(NOW)
    assert found.weights == [("ns.llm", "east", 0)]
    [event] = [e for e in found.events if e.reason == "TrafficShifted"]
    assert event.type == "Warning" and "region east drained: no ready replica" in event.message
    # healed, it waits out the hold; the pass asks to be woken for its first step
    status = {"replicas": 3, "regions": [{"name": "east", **{k: east[k] for k in (
        "traffic", "trafficWeight", "trafficSince", "trafficReason")}}]}
    found = decided(proxy, status)
    east = {r["name"]: r for r in found.desired["regions"]}["east"]
    assert (east["traffic"], east["trafficWeight"]) == ("Returning", 0)
    assert east["trafficReason"] == f"healthy again: held back until {millis(NOW + HOLD)}"
    assert found.wake_at == NOW + HOLD
    assert not [e for e in found.events if e.reason == "TrafficShifted"]


def test_a_backend_the_admin_did_not_declare_routes_nothing() -> None:
    found = decided(ProxyView({("ns.other", "east"): Entry(True, 1)}))
    assert found.weights == []
    assert conditions(found.desired)["Routed"] == ("False", "BackendMissing")
    assert all("traffic" not in r for r in found.desired["regions"])


def test_an_unreadable_proxy_keeps_the_last_word() -> None:
    last = {"replicas": 3, "regions": [{"name": "east", "traffic": "Drained",
                                        "trafficWeight": 0, "trafficSince": millis(NOW - 9),
                                        "trafficReason": "no ready replica"}]}
    found = decided(ProxyView({}, error="/run/haproxy.sock: connection refused"), last)
    east = {r["name"]: r for r in found.desired["regions"]}["east"]
    assert (east["traffic"], east["trafficSince"]) == ("Drained", millis(NOW - 9))
    assert found.weights == []
    assert conditions(found.desired)["Routed"] == ("False", "ProxyUnreachable")


def test_without_a_proxy_nothing_is_said_of_traffic() -> None:
    children = [child(0, "east", True, 0, "cluster-e")]
    snapshot = world(None, endpoints=[routed_parent()], delegated_endpoints=children,
                     kueue=True)
    with trial(snapshot):
        found = decide_endpoints(snapshot, [])[0]
    assert "Routed" not in conditions(found.desired)
    assert found.weights == []
    assert all("traffic" not in r for r in found.desired["regions"])
