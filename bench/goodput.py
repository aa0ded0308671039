"""Goodput benchmark: the operator's policy against three baselines on the same failures,
from Llama 3's 16,384 accelerators up to a Rainier-sized 500k, with the simulator
(goodput_operator.simulate) deciding by the operator's own functions.

    python -m bench.goodput [--quick] [--json] [--seed S] [--svg DIR]

1. llama3: 16,384 H100s (2,048 p5 nodes), 54 days, Llama 3's published failure rates;
   the four policies side by side (target: ours >= 98%).
2. curve: Trainium2 UltraServer fleets of 16k .. 500k accelerators for 7 days, the four
   policies on each (the 500k run is the speed target: under 10 minutes, memory reported).
3. spares: goodput against the group's spares at 16k (Llama 3 rates, 54 days).
4. rainier: what 500k needs to stay above 95%: one day at 500k for detection, restart and
   checkpoint-save figures, and the same fleet split into independent jobs.

Each part's fleet holds spares for twice the nodes expected down (failure rate x repair
time) unless the part varies them. Time is this machine's wall clock per run; memory is
the process's peak RSS after the part.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import resource
import sys
import time
from pathlib import Path
from typing import Any

from goodput_operator.simulate.chart import line_chart
from goodput_operator.simulate.plan import expected_down, table
from goodput_operator.simulate.policies import Costs
from goodput_operator.simulate.scenario import (
    POLICIES,
    Run,
    Scenario,
    job_spec,
    load_fleet,
    run,
)

CURVE = (256, 1024, 2048, 4096, 7813)  # Trn2 UltraServers: 16k .. 500k accelerators
QUICK_CURVE = (256, 1024)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def provisioned(ref: str, days: float, seed: int, factor: float = 2.0,
                costs: Costs | None = None) -> Scenario:
    """A scenario whose group holds spares for FACTOR x the nodes expected down."""
    bare = Scenario(load_fleet(ref), days=days, seed=seed, costs=costs or Costs())
    spares = math.ceil(factor * expected_down(bare))
    return dataclasses.replace(bare, fleet=bare.fleet.with_spares(0, spares))


def drawn(scenario: Scenario) -> int:
    """Failures in the run itself (the draw starts a repair time earlier: the warm-up)."""
    return sum(1 for f in scenario.failures() if f.time >= 0)


def summary(runs: dict[str, Run]) -> dict[str, Any]:
    out = {}
    for name, outcome in runs.items():
        r = outcome.result
        out[name] = {"goodput": round(r.goodput, 5), "job_goodput": round(r.job_goodput, 5),
                     "incidents": r.incidents, "seconds": round(outcome.seconds, 2),
                     "badput_pct": {k: round(100 * v / r.paid, 4) for k, v in r.lost.items()},
                     "by_cause_pct": {k: round(100 * v / r.paid, 4)
                                      for k, v in r.by_cause.items()},
                     "uncounted_pct": round(100 * r.uncounted / r.paid, 4)}
    return out


def part_llama3(seed: int, days: float) -> dict[str, Any]:
    scenario = provisioned("synthetic:p5:512", days, seed)
    started = time.perf_counter()
    runs = run(scenario)
    seconds = time.perf_counter() - started
    log(f"\n== llama3: {scenario.fleet.accelerators} accelerators, {days:g} days, "
        f"{drawn(scenario)} failures, {scenario.fleet.spare_nodes} spare nodes; "
        f"{seconds:.1f}s for the four policies")
    for line in table(runs):
        log(line)
    return {"accelerators": scenario.fleet.accelerators, "days": days,
            "spares": scenario.fleet.spare_nodes, "failures": drawn(scenario),
            "seconds": round(seconds, 2), "policies": summary(runs)}


KUEUE_UP_TO = 131_072  # accelerators: past this the Kueue baseline is left out (below)


def part_curve(seed: int, sizes: tuple[int, ...], days: float) -> list[dict[str, Any]]:
    """Each size under every policy. Kueue's evictions re-place the whole gang in the
    simulator (about a second each at 500k, at every failure): it runs up to KUEUE_UP_TO."""
    rows = []
    for domains in sizes:
        scenario = provisioned(f"synthetic:trn2:{domains}", days, seed)
        names = tuple(n for n in POLICIES
                      if n != "kueue" or scenario.fleet.accelerators <= KUEUE_UP_TO)
        started = time.perf_counter()
        runs = run(scenario, names)
        seconds = time.perf_counter() - started
        row = {"accelerators": scenario.fleet.accelerators, "days": days,
               "spares": scenario.fleet.spare_nodes, "failures": drawn(scenario),
               "seconds": round(seconds, 2), "ours_seconds": round(runs["ours"].seconds, 2),
               "peak_rss_mib": round(peak_rss_mib(), 1), "policies": summary(runs)}
        rows.append(row)
        log(f"curve {row['accelerators']:>7}: " + "  ".join(
            f"{n} {100 * runs[n].result.goodput:6.2f}%" for n in names) +
            f"  ({seconds:.0f}s, ours {runs['ours'].seconds:.0f}s, "
            f"peak RSS {row['peak_rss_mib']:.0f} MiB)")
    return rows


def part_spares(seed: int, days: float) -> list[dict[str, Any]]:
    bare = Scenario(load_fleet("synthetic:p5:512"), days=days, seed=seed)
    down = expected_down(bare)
    failures = bare.failures()
    rows = []
    for factor in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0):
        spares = math.ceil(factor * down)
        scenario = dataclasses.replace(bare, fleet=bare.fleet.with_spares(0, spares))
        runs = run(scenario, failures=failures)
        rows.append({"spares": spares, "factor": factor,
                     "goodput": {n: round(r.result.goodput, 5) for n, r in runs.items()}})
        log(f"spares {spares:>4} ({factor:g} x {down:.1f} down): " + "  ".join(
            f"{n} {100 * r.result.goodput:6.2f}%" for n, r in runs.items()))
    return rows


FAST = {"lease_renew_seconds": 2.0, "pass_seconds": 0.1}  # with leaseSilenceSeconds 5
# name: (Costs overrides, jobs the fleet is split into, failurePolicy.hang.minSeconds)
RAINIER_CASES: dict[str, tuple[dict[str, Any], int, int]] = {
    "measured": ({}, 1, 600),
    "detect ~5s": (FAST, 1, 600),
    "save 0.1s": ({"save_seconds": 0.1}, 1, 600),
    "detect ~5s, save 0.1s": ({**FAST, "save_seconds": 0.1}, 1, 600),
    "detect ~5s, hang 60s, save 0.1s": ({**FAST, "save_seconds": 0.1}, 1, 60),
    "load 60s": ({"load_seconds": 60.0}, 1, 600),
    "8 jobs": ({}, 8, 600),
    "8 jobs, save 0.1s": ({"save_seconds": 0.1}, 8, 600),
    # assumptions, not measured here (docs/planning.md): a snapshot to host memory and a
    # restore from a peer's; half the node failures announced 120 s ahead
    "in-memory": ({"in_memory": True}, 1, 600),
    "notices 50%": ({"notice_fraction": 0.5}, 1, 600),
    "in-memory, notices 50%, detect ~5s": (
        {**FAST, "in_memory": True, "notice_fraction": 0.5}, 1, 600),
}


def hang_job(seconds: int, per_node: int) -> dict[str, Any]:
    """The simulated gang with failurePolicy.hang.minSeconds SECONDS."""
    spec = job_spec(1, per_node).model_dump(by_alias=True, exclude_none=True)
    spec["failurePolicy"]["hang"]["minSeconds"] = seconds
    return {"kind": "TrainingJob", "spec": spec}


def part_rainier(seed: int, domains: int, days: float, cases: list[str] | None = None
                 ) -> dict[str, Any]:
    base = provisioned(f"synthetic:trn2:{domains}", days, seed)
    failures = base.failures()
    out = {}
    for name, (overrides, jobs, hang) in RAINIER_CASES.items():
        if cases and name not in cases:
            continue
        costs = dataclasses.replace(Costs(), **overrides)
        workers = len(base.fleet.nodes) - base.fleet.spare_nodes
        fleet = base.fleet.with_quarantine(lease_silence_seconds=5) \
            if "lease_renew_seconds" in overrides else base.fleet
        document = hang_job(hang, fleet.per_node) if hang != 600 else None
        scenario = dataclasses.replace(base, costs=costs, fleet=fleet, job_document=document,
                                       jobs=[workers // jobs] * jobs if jobs > 1 or document
                                       else [])
        result = run(scenario, ("ours",), failures)["ours"].result
        badput = {k: round(100 * v / result.paid, 3) for k, v in result.lost.items()}
        out[name] = {"goodput": round(result.goodput, 5),
                     "job_goodput": round(result.job_goodput, 5), "badput_pct": badput}
        log(f"rainier {name:32} goodput {100 * result.goodput:6.2f}%  " + " ".join(
            f"{k} {v:.2f}%" for k, v in badput.items()))
    return {"accelerators": base.fleet.accelerators, "days": days,
            "failures": drawn(base), "cases": out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small fleets and short spans (a smoke run)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--svg", type=Path, help="write the charts (SVG) into this folder")
    parser.add_argument("--rainier", type=int, action="append", metavar="DOMAINS",
                        help="only the Rainier cases, on this many Trn2 UltraServers (64 "
                             "chips each; repeatable: 256 is 16k, 1563 100k, 7813 500k)")
    parser.add_argument("--case", action="append", default=[],
                        help="with --rainier: only this case (repeatable): "
                             f"{'; '.join(RAINIER_CASES)}")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.rainier:
        cases = args.case
        unknown = sorted(set(cases) - set(RAINIER_CASES))
        if unknown:
            parser.error(f"unknown cases {unknown}")
        sizes = {str(d * 64): part_rainier(args.seed, d, 1, cases) for d in args.rainier}
        if args.json:
            print(json.dumps({"seed": args.seed, "rainier": sizes,
                              "seconds": round(time.perf_counter() - started, 1)}, indent=1))
        return 0
    quick = args.quick
    output: dict[str, Any] = {"seed": args.seed}
    output["llama3"] = part_llama3(args.seed, 7 if quick else 54)
    output["curve"] = part_curve(args.seed, QUICK_CURVE if quick else CURVE, 2 if quick else 7)
    output["spares"] = part_spares(args.seed, 7 if quick else 54)
    output["rainier"] = part_rainier(args.seed, 256 if quick else 7813, 0.5 if quick else 1)
    output["seconds"] = round(time.perf_counter() - started, 1)
    output["peak_rss_mib"] = round(peak_rss_mib(), 1)
    if args.svg:
        args.svg.mkdir(parents=True, exist_ok=True)
        curve = {n: [(row["accelerators"], 100 * row["policies"][n]["goodput"])
                     for row in output["curve"] if n in row["policies"]] for n in POLICIES}
        (args.svg / "goodput-vs-size.svg").write_text(line_chart(
            "Goodput vs fleet size (Trn2, 7 days, Llama 3 rates)", "accelerators", curve,
            log_x=True))
        spares = {n: [(row["spares"], 100 * row["goodput"][n]) for row in output["spares"]]
                  for n in POLICIES}
        (args.svg / "goodput-vs-spares.svg").write_text(line_chart(
            "Goodput vs spare nodes (16,384 H100s, 54 days)", "spare nodes", spares))
    if args.json:
        print(json.dumps(output, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
