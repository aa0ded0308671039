"""Autoscaling benchmark: a bursty request trace through our autoscaler and through the
Kubernetes HPA algorithm with its default behaviour, in the same run.

    python -m bench.autoscaling [--json] [--minutes N] [--seed S] [--cold-start S]

A discrete simulation, one step per second. Requests arrive by a seeded trace (a daily-ish
swell, noise, and bursts of 3-6x lasting 1-4 minutes); each ready replica serves MU
requests/s; a replica is ready COLD_START seconds after it is asked for and is paid for
from that moment. Both autoscalers see the same metric — the total queue depth, sampled
every 15 s (the HPA's sync period) — with the same target (8 queued requests per replica),
tolerance (10%), bounds (1..64) and cold start. The HPA runs its algorithm as documented:
desired = ceil(current x metric/target), scale-up stabilization 0 s with max(4 pods, 100%)
per 15 s, scale-down stabilization 300 s with 100% per 15 s. Ours runs
goodput_operator.autoscaling.recommend with the same windows plus panic mode (threshold 2x)
and counts replicas still starting as capacity on the way (desired, not ready).

Reported per autoscaler: SLO-violation seconds (seconds when a new request would wait
more than SLO seconds in the queue), replica-seconds (paid), scaling actions. Target:
fewer SLO-violation seconds at no more replica-seconds than the HPA.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from goodput_operator.api.inferenceendpoint import Scaling
from goodput_operator.autoscaling.algorithm import History, Sample, recommend

MU = 4.0  # requests/s per ready replica
TARGET = 8.0  # queued requests per replica
SLO = 2.0  # seconds a new request may wait
PERIOD = 15  # metric sampling / evaluation period (the HPA's sync period)
MAX_REPLICAS = 64


def trace(minutes: int, seed: int) -> list[float]:
    """Requests per second, one value per second."""
    rng = random.Random(seed)
    seconds = minutes * 60
    rate = []
    bursts: list[tuple[int, int, float]] = []
    t = rng.randint(120, 600)
    while t < seconds:
        bursts.append((t, rng.randint(60, 240), rng.uniform(3, 6)))
        t += rng.randint(300, 1200)
    for second in range(seconds):
        swell = 30 + 20 * math.sin(2 * math.pi * second / (minutes * 60))
        level = swell * rng.uniform(0.9, 1.1)
        for start, length, factor in bursts:
            if start <= second < start + length:
                level *= factor
        rate.append(max(level, 0.0))
    return rate


@dataclass
class Run:
    name: str
    decide: Callable[[float, int, float], int]  # (queue, current desired, now) -> desired
    cold_start: int
    desired: int = 8
    starting: list[int] = field(default_factory=list)  # ready times of replicas coming up
    ready: int = 8
    queue: float = 0.0
    violations: int = 0
    replica_seconds: float = 0.0
    actions: int = 0

    def step(self, second: int, arrivals: float) -> None:
        while self.starting and self.starting[0] <= second:
            self.starting.pop(0)
            self.ready += 1
        served = self.ready * MU
        self.queue = max(0.0, self.queue + arrivals - served)
        if self.ready == 0 or self.queue / max(served, 1e-9) > SLO:
            self.violations += 1
        self.replica_seconds += self.ready + len(self.starting)
        if second % PERIOD == 0:
            wanted = self.decide(self.queue, self.desired, float(second))
            if wanted != self.desired:
                self.actions += 1
            if wanted > self.desired:
                self.starting += [second + self.cold_start] * (wanted - self.desired)
            elif wanted < self.desired:
                drop = self.desired - wanted
                cancel = min(drop, len(self.starting))  # not yet ready ones go first
                self.starting = self.starting[:len(self.starting) - cancel]
                self.ready -= drop - cancel
            self.desired = wanted


def hpa() -> Callable[[float, int, float], int]:
    """The HPA algorithm, default behaviour (k8s.io/kubernetes pkg/controller/podautoscaler)."""
    recommendations: list[tuple[float, int]] = []
    changes: list[tuple[float, int]] = []  # time, replicas before

    def at(when: float, current: int) -> int:
        count = current
        for time, before in reversed(changes):
            if time <= when:
                break
            count = before
        return count

    def decide(queue: float, current: int, now: float) -> int:
        ratio = (queue / current) / TARGET if current else 1.0
        raw = current if abs(ratio - 1) <= 0.1 else math.ceil(current * ratio)
        raw = max(1, min(MAX_REPLICAS, raw))
        recommendations.append((now, raw))
        recommendations[:] = [(t, r) for t, r in recommendations if t >= now - 300]
        if raw > current:
            base = at(now - 15, current)
            desired = min(raw, max(base + 4, base * 2))
        elif raw < current:
            # the highest recommendation of the last 300 s; 100% per 15 s allows any step
            desired = min(current, max(r for t, r in recommendations if t >= now - 300))
        else:
            desired = current
        if desired != current:
            changes.append((now, current))
        return desired
    return decide


def ours(lookahead: int, panic: bool = True, down: int = 300
         ) -> Callable[[float, int, float], int]:
    spec = Scaling.model_validate({
        "minReplicas": 1, "maxReplicas": MAX_REPLICAS, "tolerance": 0.1,
        "intervalSeconds": PERIOD, "metrics": [{"type": "QueueDepth", "target": TARGET}],
        "scaleUp": {"stabilizationSeconds": 0}, "scaleDown": {"stabilizationSeconds": down},
        "panic": {"enabled": panic, "threshold": 2}, "lookaheadSeconds": lookahead})
    history = History()

    def decide(queue: float, current: int, now: float) -> int:
        sample = Sample("QueueDepth", TARGET, queue)
        return recommend([sample], current, spec, history, now).desired
    return decide


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=int, default=240)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--seeds", type=int, default=5, help="traces to run (seed, seed+1..)")
    parser.add_argument("--cold-start", type=int, default=60)
    parser.add_argument("--lookahead", type=int, default=0,
                        help="our scaling.lookaheadSeconds (0: off)")
    parser.add_argument("--no-panic", action="store_true", help="our panic mode off")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows: list[dict[str, int]] = []
    for seed in range(args.seed, args.seed + args.seeds):
        rates = trace(args.minutes, seed)
        runs = [Run("hpa", hpa(), args.cold_start),
                Run("goodput", ours(args.lookahead, not args.no_panic), args.cold_start)]
        for second, arrivals in enumerate(rates):
            for run in runs:
                run.step(second, arrivals)
        rows.append({"seed": seed, **{f"{r.name}_{k}": v for r in runs for k, v in (
            ("slo_violation_s", r.violations), ("replica_s", round(r.replica_seconds)),
            ("actions", r.actions))}})
    totals: dict[str, int] = {k: sum(int(r[k]) for r in rows) for k in rows[0] if k != "seed"}
    print(f"| trace seed | HPA SLO-violation s | ours | HPA replica-s | ours | HPA actions "
          f"| ours |  ({args.minutes} min each, cold start {args.cold_start} s)")
    print("|---|---|---|---|---|---|---|")
    for row in [*rows, {"seed": -1, **totals}]:
        label = str(row["seed"]) if row["seed"] >= 0 else "**total**"
        print(f"| {label} | {row['hpa_slo_violation_s']} | "
              f"{row['goodput_slo_violation_s']} | {row['hpa_replica_s']} | "
              f"{row['goodput_replica_s']} | {row['hpa_actions']} | {row['goodput_actions']} |")
    slo = totals["goodput_slo_violation_s"] / max(totals["hpa_slo_violation_s"], 1)
    cost = totals["goodput_replica_s"] / totals["hpa_replica_s"]
    met = slo < 1 and cost <= 1
    print(f"\nours / HPA: SLO-violation seconds {slo:.2f}x, replica-seconds {cost:.2f}x; "
          f"target (fewer violations at no more replica-seconds): {'met' if met else 'NOT met'}")
    if args.json:
        print(json.dumps({"rows": rows, "totals": totals, "slo_ratio": round(slo, 3),
                          "replica_ratio": round(cost, 3), "met": met}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
