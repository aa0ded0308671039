"""Autoscaling benchmark: a bursty request trace through our autoscaler and through the
Kubernetes HPA algorithm with its default behaviour, in the same run.

    python -m bench.autoscaling [--json] [--minutes N] [--seed S] [--cold-start S]

A discrete simulation, one step per second. Requests arrive by a seeded trace of one of
three kinds: *bursty* (a slow swell, noise, and bursts of 3-6x lasting 1-4 minutes),
*diurnal* (a day's swell from a night's trickle to a peak 20x higher, compressed into the
run) and *flash* (a steady load, then a crowd of 5-8x arriving within seconds and fading
over minutes). Each ready replica serves MU requests/s; a replica is ready COLD_START
seconds after it is asked for and is paid for from that moment. Metrics are sampled every
15 s (the HPA's sync period), with the same tolerance (10%), windows, bounds (1..64) and
cold start for both. The HPA scales on the total queue depth (target 8 queued requests
per replica) and runs its algorithm as documented: desired = ceil(current x
metric/target), scale-up stabilization 0 s with max(4 pods, 100%) per 15 s, scale-down
stabilization 300 s with 100% per 15 s. Ours runs goodput_operator.autoscaling.recommend
with the same windows, panic mode (threshold 2x), and two metrics: RequestRate (the
arrival rate over the last RATE_WINDOW seconds, as the default query's rate over [1m];
target MU) and the same QueueDepth, whose backlog adds the replicas that drain it.
Replicas still starting count as capacity on the way (desired, not ready). A third run,
the HPA on the arrival rate alone, shows what the backlog term adds; a fourth, the HPA on
both the queue and the rate (the larger need wins), models bench.autoscaling_peers' tuned
HPA.

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
from typing import Any

from goodput_operator.api.inferenceendpoint import Scaling
from goodput_operator.autoscaling.algorithm import History, Sample, recommend

MU = 4.0  # requests/s per ready replica
TARGET = 8.0  # queued requests per replica
SLO = 2.0  # seconds a new request may wait
PERIOD = 15  # metric sampling / evaluation period (the HPA's sync period)
MAX_REPLICAS = 64
RATE_WINDOW = 60  # seconds the arrival rate is averaged over (rate(...[1m]))
KINDS = ("bursty", "diurnal", "flash")


def trace(minutes: int, seed: int, kind: str = "bursty") -> list[float]:
    """Requests per second, one value per second."""
    if kind == "diurnal":
        return diurnal(minutes, seed)
    if kind == "flash":
        return flash(minutes, seed)
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


def diurnal(minutes: int, seed: int) -> list[float]:
    """A day compressed into MINUTES: a night's 6 req/s swelling to a peak of 120 and back,
    with +-10% noise and the peak's hour shifted by the seed."""
    rng = random.Random(seed)
    seconds = minutes * 60
    peak = rng.uniform(0.4, 0.6) * seconds
    return [max(0.0, (6 + 114 * math.exp(-((second - peak) / (seconds / 6)) ** 2))
                * rng.uniform(0.9, 1.1)) for second in range(seconds)]


def flash(minutes: int, seed: int) -> list[float]:
    """A steady 25-35 req/s, then one crowd: 5-8x within 10 s at a random moment of the
    run's middle, held 3-8 minutes, fading over about 10 minutes."""
    rng = random.Random(seed)
    seconds = minutes * 60
    base = rng.uniform(25, 35)
    start = rng.randint(seconds // 4, seconds // 2)
    hold, factor = rng.randint(180, 480), rng.uniform(5, 8)
    rate = []
    for second in range(seconds):
        level = 1.0
        if start <= second < start + hold:
            level = 1 + (factor - 1) * min(1.0, (second - start) / 10)
        elif second >= start + hold:
            level = 1 + (factor - 1) * math.exp(-(second - start - hold) / 200)
        rate.append(base * level * rng.uniform(0.9, 1.1))
    return rate


@dataclass
class Run:
    name: str
    decide: Callable[[float, float, int, float], int]  # (queue, arrivals/s, desired, now)
    cold_start: int
    desired: int = 8
    starting: list[int] = field(default_factory=list)  # ready times of replicas coming up
    ready: int = 8
    queue: float = 0.0
    violations: int = 0
    replica_seconds: float = 0.0
    actions: int = 0
    recent: list[float] = field(default_factory=list)  # arrivals of the last RATE_WINDOW s

    def step(self, second: int, arrivals: float) -> None:
        self.recent = [*self.recent[1 - RATE_WINDOW:], arrivals]
        while self.starting and self.starting[0] <= second:
            self.starting.pop(0)
            self.ready += 1
        served = self.ready * MU
        self.queue = max(0.0, self.queue + arrivals - served)
        if self.ready == 0 or self.queue / max(served, 1e-9) > SLO:
            self.violations += 1
        self.replica_seconds += self.ready + len(self.starting)
        if second % PERIOD == 0:
            rate = sum(self.recent) / len(self.recent)
            wanted = self.decide(self.queue, rate, self.desired, float(second))
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


def hpa(on_rate: bool = False, on_queue: bool = True) -> Callable[[float, float, int, float], int]:
    """The HPA algorithm, default behaviour (k8s.io/kubernetes pkg/controller/podautoscaler),
    on the queue depth (ON_QUEUE) and/or the arrival rate (ON_RATE, target MU per replica):
    with both, the larger recommendation (bench.autoscaling_peers' tuned HPA)."""
    recommendations: list[tuple[float, int]] = []
    changes: list[tuple[float, int]] = []  # time, replicas before

    def at(when: float, current: int) -> int:
        count = current
        for time, before in reversed(changes):
            if time <= when:
                break
            count = before
        return count

    def decide(queue: float, rate: float, current: int, now: float) -> int:
        if not changes and not recommendations:
            # the HPA seeds its scale-down window with the replicas it first finds
            # (maybeInitScaleDownStabilizationWindow)
            recommendations.append((now, current))
        ratios = ([(rate / current) / MU] if on_rate else []) + \
            ([(queue / current) / TARGET] if on_queue else [])
        raw = max(current if not current or abs(r - 1) <= 0.1 else math.ceil(current * r)
                  for r in ratios)
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


def ours(lookahead: int, panic: bool = True, down: int = 300, on_rate: bool = True
         ) -> Callable[[float, float, int, float], int]:
    """Our autoscaler on the arrival rate and the queue (ON_RATE), or on the queue alone."""
    metrics = [{"type": "RequestRate", "target": MU}] if on_rate else []
    spec = Scaling.model_validate({
        "minReplicas": 1, "maxReplicas": MAX_REPLICAS, "tolerance": 0.1,
        "intervalSeconds": PERIOD,
        "metrics": [*metrics, {"type": "QueueDepth", "target": TARGET}],
        "scaleUp": {"stabilizationSeconds": 0}, "scaleDown": {"stabilizationSeconds": down},
        "panic": {"enabled": panic, "threshold": 2}, "lookaheadSeconds": lookahead})
    history = History()

    def decide(queue: float, rate: float, current: int, now: float) -> int:
        samples = [Sample("QueueDepth", TARGET, queue)]
        if on_rate:
            samples.append(Sample("RequestRate", MU, rate))
        return recommend(samples, current, spec, history, now).desired
    return decide


def simulate(kind: str, seed: int, minutes: int, cold_start: int, lookahead: int,
             panic: bool, on_rate: bool) -> dict[str, int | str]:
    """One trace through the HPA, ours and the HPA on the arrival rate: a table row."""
    rates = trace(minutes, seed, kind)
    runs = [Run("hpa", hpa(), cold_start),
            Run("goodput", ours(lookahead, panic, on_rate=on_rate), cold_start),
            Run("hpa_rate", hpa(on_rate=True, on_queue=False), cold_start),
            Run("hpa_tuned", hpa(on_rate=True), cold_start)]
    for second, arrivals in enumerate(rates):
        for run in runs:
            run.step(second, arrivals)
    return {"trace": kind, "seed": seed, **{f"{r.name}_{k}": v for r in runs for k, v in (
        ("slo_violation_s", r.violations), ("replica_s", round(r.replica_seconds)),
        ("actions", r.actions))}}


def met(row: dict[str, Any]) -> bool:
    """Fewer SLO-violation seconds (or none where the HPA has none) at no more
    replica-seconds than the HPA on the queue."""
    fewer = row["goodput_slo_violation_s"] < row["hpa_slo_violation_s"] or \
        row["goodput_slo_violation_s"] == row["hpa_slo_violation_s"] == 0
    return bool(fewer and row["goodput_replica_s"] <= row["hpa_replica_s"])


def times(row: dict[str, Any], figure: str, baseline: str = "hpa") -> float:
    """Ours over BASELINE's FIGURE."""
    return float(row[f"goodput_{figure}"] / max(row[f"{baseline}_{figure}"], 1))


def ratio(row: dict[str, Any], figure: str, baseline: str = "hpa") -> str:
    return f"{times(row, figure, baseline):.2f}x"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=int, default=240)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--seeds", type=int, default=5, help="traces to run (seed, seed+1..)")
    parser.add_argument("--traces", default=",".join(KINDS),
                        help=f"trace kinds, comma-separated ({', '.join(KINDS)})")
    parser.add_argument("--cold-start", type=int, default=60)
    parser.add_argument("--lookahead", type=int, default=0,
                        help="our scaling.lookaheadSeconds (0: off)")
    parser.add_argument("--no-panic", action="store_true", help="our panic mode off")
    parser.add_argument("--on-queue", action="store_true",
                        help="ours on the queue depth alone (no RequestRate metric)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    kinds = [k for k in args.traces.split(",") if k]
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"unknown trace kind(s): {', '.join(sorted(unknown))}")
    rows = [simulate(kind, seed, args.minutes, args.cold_start, args.lookahead,
                     not args.no_panic, not args.on_queue)
            for kind in kinds for seed in range(args.seed, args.seed + args.seeds)]
    figures = [k for k in rows[0] if k not in ("trace", "seed")]
    totals: dict[str, Any] = {k: sum(int(r[k]) for r in rows) for k in figures}
    print(f"| trace | seed | HPA SLO-violation s | ours | ratio | HPA replica-s | ours | ratio "
          f"| HPA actions | ours | HPA on the rate: violation s / replica-s "
          f"| HPA on both (tuned) | met |"
          f"  ({args.minutes} min each, cold start {args.cold_start} s)")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in [*rows, {"trace": "**total**", "seed": "", **totals}]:
        print(f"| {row['trace']} | {row['seed']} | {row['hpa_slo_violation_s']} | "
              f"{row['goodput_slo_violation_s']} | {ratio(row, 'slo_violation_s')} | "
              f"{row['hpa_replica_s']} | {row['goodput_replica_s']} | "
              f"{ratio(row, 'replica_s')} | {row['hpa_actions']} | {row['goodput_actions']} | "
              f"{row['hpa_rate_slo_violation_s']} / {row['hpa_rate_replica_s']} | "
              f"{row['hpa_tuned_slo_violation_s']} / {row['hpa_tuned_replica_s']} | "
              f"{'yes' if met(row) else '**no**'} |")
    every = all(met(row) for row in rows)
    print(f"\nours / HPA, all traces: SLO-violation seconds {ratio(totals, 'slo_violation_s')},"
          f" replica-seconds {ratio(totals, 'replica_s')}; against the HPA on the arrival "
          f"rate: {ratio(totals, 'slo_violation_s', 'hpa_rate')} / "
          f"{ratio(totals, 'replica_s', 'hpa_rate')}; against the HPA on both (tuned): "
          f"{ratio(totals, 'slo_violation_s', 'hpa_tuned')} / "
          f"{ratio(totals, 'replica_s', 'hpa_tuned')}; target (fewer violations at no more "
          f"replica-seconds, on every trace): "
          f"{'met' if every else 'NOT met on ' + str(sum(not met(r) for r in rows))}")
    if args.json:
        print(json.dumps({"rows": rows, "totals": totals,
                          "slo_ratio": round(times(totals, "slo_violation_s"), 3),
                          "replica_ratio": round(times(totals, "replica_s"), 3),
                          "met_every_trace": every}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
