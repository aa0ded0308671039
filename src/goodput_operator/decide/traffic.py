"""A multi-region endpoint's requests, on the manager that routes them: each region's
weight in the proxy (autoscaling.routing decides it), written into the endpoint's
status.regions beside its replicas, with condition Routed, and the weights the proxy
must be told (controllers.routing tells it).

Who may point traffic where is the admin's (TENANCY.md): the proxy is the operator's
flag, and the backend and each region's entry address are in the admin's proxy
configuration. A tenant's endpoint only moves weights inside the backend named after it;
one the admin did not declare is said on that endpoint alone (Routed=False,
BackendMissing) and routes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from goodput_operator import times
from goodput_operator.api.statuses import RegionStatusDict
from goodput_operator.autoscaling.routing import (
    Entry,
    ProxyView,
    Route,
    Signal,
    Traffic,
    backend_name,
    next_step,
    route,
)
from goodput_operator.decide.types import ConditionUpdate, Event

TRAFFIC_STATES: tuple[Traffic, ...] = ("Serving", "Drained", "Returning")


@dataclass
class Routing:
    """What routing adds to a multi-region endpoint's pass."""

    regions: list[RegionStatusDict]
    condition: ConditionUpdate
    events: list[Event] = field(default_factory=list)
    weights: list[tuple[str, str, int]] = field(default_factory=list)  # backend, server,
    # weight: those the proxy does not use yet
    wake_at: float | None = None  # a returning region's next step


def routed(proxy: ProxyView, key: tuple[str, str], regions: Sequence[RegionStatusDict],
           last: Sequence[RegionStatusDict], now: float, return_seconds: int) -> Routing:
    """REGIONS (this pass's status.regions) of the endpoint KEY (namespace, name) with
    each region's traffic, from PROXY and what LAST (the status as read) remembered."""
    backend = backend_name(*key)
    if proxy.error:
        return Routing([{**r, **_kept(r["name"], last)} for r in regions], ConditionUpdate(
            "Routed", False, "ProxyUnreachable",
            f"cannot read the proxy: {proxy.error}; its weights stay as they were"))
    entries = proxy.servers(backend)
    if not entries:
        return Routing(list(regions), ConditionUpdate(
            "Routed", False, "BackendMissing",
            f"the proxy has no backend {backend}: the admin declares it, with a server "
            "per region named after it (docs/multicluster.md)"))
    previous = {r["name"]: (_traffic(r.get("traffic")), times.parse(r.get("trafficSince"))
                            or now) for r in last if r.get("traffic")}
    routes = route([Signal(r["name"], r.get("readyReplicas") or 0, entries.get(r["name"]))
                    for r in regions], previous, now, return_seconds)
    found = Routing([{**r, **_shown(x)} for r, x in zip(regions, routes, strict=True)],
                    ConditionUpdate("Routed", True, "WeightsSet", f"backend {backend}: " +
                                    ", ".join(f"{x.name} {x.weight}" for x in routes)))
    found.wake_at = min((next_step(x.since, now, return_seconds) for x in routes
                         if x.traffic == "Returning"), default=None)
    for x in routes:
        entry: Entry | None = entries.get(x.name)
        if entry is not None and entry.weight != x.weight:
            found.weights.append((backend, x.name, x.weight))
        before = previous.get(x.name, ("Serving", now))[0]
        if x.traffic == "Drained" and before != "Drained":
            found.events.append(Event("Warning", "TrafficShifted",
                                      f"region {x.name} drained: {x.reason}"))
        elif x.traffic == "Serving" and before == "Returning":
            found.events.append(Event("Normal", "TrafficReturned",
                                      f"region {x.name} back at its full share"))
    return found


def _traffic(text: str | None) -> Traffic:
    return next((t for t in TRAFFIC_STATES if t == text), "Serving")


def _shown(x: Route) -> RegionStatusDict:
    return {"traffic": x.traffic, "trafficWeight": x.weight,
            "trafficSince": times.millis(x.since), "trafficReason": x.reason}


def _kept(name: str, last: Sequence[RegionStatusDict]) -> RegionStatusDict:
    """What LAST said of region NAME's traffic (the proxy unread: nothing new is known)."""
    was = next((r for r in last if r.get("name") == name), None)
    kept: RegionStatusDict = {}
    if was is not None and was.get("traffic") is not None:
        kept = {"traffic": was.get("traffic"), "trafficWeight": was.get("trafficWeight"),
                "trafficSince": was.get("trafficSince"),
                "trafficReason": was.get("trafficReason")}
    return kept
