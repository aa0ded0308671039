"""Requests routed across regions (issue 50, item 4): open-loop load through a real HAProxy
to three regions with different added latencies; one region fails, then heals.

    python -m bench.routing [--json] [--rate 200] [--return-seconds 10] [--seconds 60]

The proxy is Debian's HAProxy 2.6 as the admin configures it (sandbox/haproxy.py: health
checks every 0.5 s, down after 2 failures; a refused connection or a 503 retried once on
another region). The regions' entries are processes on the host (sandbox/entry.py) that
answer after the region's added latency (region-a 5 ms, region-b 20 ms, region-c 45 ms),
with 4, 4 and 2 ready replicas. The sandbox's regions are KWOK nodes whose serving pods
run nothing, so the entries stand in for each region's serving pods; the readiness the
manager would learn from MultiKueue's copied statuses is given here directly (a failed
region reports 0 ready replicas from the moment it fails: MultiKueue's copy delay is not
in these figures; tests/e2e/test_multicluster.py covers that path end to end).

Two arms, the same load and faults, one after the other:
- **ours:** the operator's routing, every second as in the operator (controllers.routing
  reads the proxy's stats; decide.traffic.routed, the function the manager's pass calls,
  derives the weights from ready replicas, the proxy's measured response times and
  queues, with the return hysteresis of `trafficReturnSeconds`; the weights are set
  through the runtime API);
- **baseline:** what "a global load balancer is yours" gives a careful user: the same
  HAProxy, health checks and retries, equal weights, nothing adjusting them.

The load is open loop (a request every 1/rate s whatever the answers; each waits at most 5
s). Region-a's entry is killed at 1/4 of the run (its connections refused; the
region reports no ready replica) and started again at 1/2. Reported per arm: the success
ratio (mark: the Azure AI WAN seed's 99.95%), latency p50/p99 overall and per region,
the share of requests each region answered; the time from the failure until the proxy
marks it down and until its weight is 0 (ours), and from the heal until it answers a
request again and until it is back at its full share (ours: 2 x trafficReturnSeconds by
design). Ratios: ours / baseline for p50 and p99 latency.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from goodput_operator.api.statuses import RegionStatusDict
from goodput_operator.autoscaling.routing import backend_name
from goodput_operator.controllers import routing
from goodput_operator.decide.traffic import routed
from goodput_operator.sandbox.entry import Entry
from goodput_operator.sandbox.haproxy import HAProxy

REGIONS = {"region-a": (5.0, 4), "region-b": (20.0, 4), "region-c": (45.0, 2)}  # ms, ready
FAILING = "region-a"
ENDPOINT = ("bench", "chat")
MARK = 0.9995  # the seed's availability
REQUEST_TIMEOUT = 5.0


@dataclass
class Sent:
    at: float  # seconds into the run
    latency: float = 0.0
    ok: bool = False
    region: str = ""


@dataclass
class Timeline:
    failed_at: float = 0.0
    healed_at: float = 0.0
    down_in_proxy: float | None = None  # the proxy's health check says DOWN
    weight_zero: float | None = None  # our router set its weight to 0
    full_share: float | None = None  # our router has it Serving again
    weights: list[tuple[float, dict[str, int]]] = field(default_factory=list)


async def load(url: str, rate: float, seconds: float, start: float) -> list[Sent]:
    """Open loop: a request every 1/RATE s for SECONDS, each on its own."""
    sent: list[Sent] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = []
        for index in range(int(rate * seconds)):
            due = start + index / rate
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            one = Sent(time.monotonic() - start)
            sent.append(one)
            tasks.append(asyncio.create_task(_request(session, url, one)))
        await asyncio.gather(*tasks)
    return sent


async def _request(session: aiohttp.ClientSession, url: str, one: Sent) -> None:
    began = time.monotonic()
    try:
        async with session.post(url, data=b'{"prompt": "hello"}', headers={
                "Host": f"{ENDPOINT[1]}.{ENDPOINT[0]}"},
                timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)) as response:
            await response.read()
            one.ok = response.status == 200
            one.region = response.headers.get("X-Region", "")
    except (TimeoutError, aiohttp.ClientError):
        one.ok = False
    one.latency = time.monotonic() - began


async def route_every_second(proxy: HAProxy, ready: dict[str, int], start: float,
                             timeline: Timeline, return_seconds: int, ours: bool,
                             stop: asyncio.Event) -> None:
    """The operator's routing pass, every second (ours), and the proxy's view of the
    failing region (both arms)."""
    last: list[RegionStatusDict] = []
    backend = backend_name(*ENDPOINT)
    while not stop.is_set():
        view = await asyncio.to_thread(routing.read, proxy.api)
        now, into = time.time(), time.monotonic() - start
        entry = view.entries.get((backend, FAILING))
        if (timeline.failed_at and timeline.down_in_proxy is None and entry is not None
                and not entry.up):
            timeline.down_in_proxy = into - timeline.failed_at
        if ours:
            regions: list[RegionStatusDict] = [{"name": n, "readyReplicas": r}
                                               for n, r in ready.items()]
            found = routed(view, ENDPOINT, regions, last, now, return_seconds)
            await routing.set_weights(proxy.api, found.weights)
            last = found.regions
            weights = {r["name"]: int(r.get("trafficWeight") or 0) for r in found.regions}
            timeline.weights.append((round(into, 1), weights))
            failing = next(r for r in found.regions if r["name"] == FAILING)
            if timeline.failed_at and timeline.weight_zero is None and not weights[FAILING]:
                timeline.weight_zero = into - timeline.failed_at
            if (timeline.healed_at and timeline.full_share is None
                    and failing.get("traffic") == "Serving"):
                timeline.full_share = into - timeline.healed_at
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)


async def faults(entries: dict[str, Entry], ready: dict[str, int], start: float,
                 seconds: float, timeline: Timeline) -> None:
    await asyncio.sleep(max(0.0, start + seconds / 4 - time.monotonic()))
    timeline.failed_at = time.monotonic() - start
    entries[FAILING].stop()
    ready[FAILING] = 0
    await asyncio.sleep(max(0.0, start + seconds / 2 - time.monotonic()))
    await asyncio.to_thread(entries[FAILING].start)
    ready[FAILING] = REGIONS[FAILING][1]
    timeline.healed_at = time.monotonic() - start


async def arm(workdir: Path, ours: bool, rate: float, seconds: float,
              return_seconds: int) -> dict[str, Any]:
    entries = {name: Entry(name, delay, workdir / f"{name}.log")
               for name, (delay, _) in REGIONS.items()}
    for entry in entries.values():
        entry.start()
    proxy = HAProxy(workdir / ("ours" if ours else "baseline"),
                    {ENDPOINT: {n: e.address for n, e in entries.items()}})
    proxy.start()
    ready = {name: replicas for name, (_, replicas) in REGIONS.items()}
    timeline, stop = Timeline(), asyncio.Event()
    try:
        await asyncio.sleep(1.5)  # the health checks' first rounds
        start = time.monotonic()
        router = asyncio.create_task(route_every_second(proxy, ready, start, timeline,
                                                        return_seconds, ours, stop))
        fault = asyncio.create_task(faults(entries, ready, start, seconds, timeline))
        sent = await load(f"{proxy.url}/v1/completions", rate, seconds, start)
        await fault
        stop.set()
        await router
    finally:
        proxy.stop()
        for entry in entries.values():
            entry.stop()
    return summary(sent, timeline)


def summary(sent: list[Sent], timeline: Timeline) -> dict[str, Any]:
    """What one arm measured (the module's list)."""
    ok = [s for s in sent if s.ok]
    back = [s.at for s in ok if s.region == FAILING and s.at >= timeline.healed_at]
    per_region = {}
    for name in REGIONS:
        mine = sorted(s.latency for s in ok if s.region == name)
        per_region[name] = {"answered": len(mine), "share": round(len(mine) / len(ok), 4)
                            if ok else 0.0, "p50_ms": _ms(mine, 0.5), "p99_ms": _ms(mine, 0.99)}
    latencies = sorted(s.latency for s in ok)
    return {
        "sent": len(sent), "succeeded": len(ok),
        "success_ratio": round(len(ok) / len(sent), 6) if sent else 0.0,
        "meets_mark": bool(sent) and len(ok) / len(sent) >= MARK,
        "p50_ms": _ms(latencies, 0.5), "p99_ms": _ms(latencies, 0.99),
        "regions": per_region,
        "failed_at_s": round(timeline.failed_at, 2), "healed_at_s": round(timeline.healed_at, 2),
        "down_in_proxy_s": _round(timeline.down_in_proxy),
        "weight_zero_s": _round(timeline.weight_zero),
        "first_answer_back_s": _round(min(back) - timeline.healed_at if back else None),
        "full_share_back_s": _round(timeline.full_share),
        "errors_after_failure": sum(1 for s in sent if not s.ok and s.at >= timeline.failed_at),
        "weights": timeline.weights[::5],
    }


def _ms(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 1)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def run(rate: float, seconds: float, return_seconds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-routing-") as tmp:
        ours = asyncio.run(arm(Path(tmp), True, rate, seconds, return_seconds))
        baseline = asyncio.run(arm(Path(tmp), False, rate, seconds, return_seconds))
    ratios = {key: round(ours[key] / baseline[key], 3) if ours[key] and baseline[key]
              else None for key in ("p50_ms", "p99_ms")}
    return {"rate_per_s": rate, "seconds": seconds, "return_seconds": return_seconds,
            "mark": MARK, "regions": {n: {"added_ms": d, "ready": r}
                                      for n, (d, r) in REGIONS.items()},
            "ours": ours, "baseline": baseline, "ratio_ours_to_baseline": ratios}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--return-seconds", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.rate, args.seconds, args.return_seconds)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    for name in ("ours", "baseline"):
        r = result[name]
        print(f"{name:9} success {r['success_ratio']:.4%} (mark {MARK:.2%}: "
              f"{'met' if r['meets_mark'] else 'MISSED'}), p50 {r['p50_ms']} ms, "
              f"p99 {r['p99_ms']} ms; down in proxy {r['down_in_proxy_s']} s, weight 0 "
              f"{r['weight_zero_s']} s, first answer back {r['first_answer_back_s']} s, "
              f"full share {r['full_share_back_s']} s")
        print("          " + ", ".join(f"{n} {v['share']:.1%} (p50 {v['p50_ms']} ms)"
                                       for n, v in r["regions"].items()))
    print(f"ratio ours/baseline: {result['ratio_ours_to_baseline']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
