"""`goodput plan`: the planner on the command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from goodput_operator.sandbox.fleet import FleetError
from goodput_operator.simulate.chart import line_chart
from goodput_operator.simulate.failures import FailureModel
from goodput_operator.simulate.plan import describe, plan
from goodput_operator.simulate.policies import Costs, policies
from goodput_operator.simulate.scenario import POLICIES, Scenario, load_fleet, read_job

COSTS = {f.replace("_", "-"): f for f in Costs.__dataclass_fields__
         if f.endswith("_seconds") or f == "interval"}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "plan", help="simulate goodput: spares, checkpoint interval, policies compared",
        description="Simulate a fleet running a workload through failures (Llama 3's rates "
                    "unless told otherwise), deciding with the operator's own functions, and "
                    "recommend the spares and checkpoint interval that maximise goodput. "
                    "docs/planning.md explains the model.")
    parser.add_argument("--fleet", default="synthetic:trn2:256",
                        help="built-in fleet, fleet file or synthetic:KIND:N "
                             "(default: %(default)s)")
    parser.add_argument("--days", type=float, default=7.0,
                        help="simulated days (default: %(default)s; the fleet starts with "
                             "the nodes of the last repair time's failures still out)")
    parser.add_argument("--jobs", default="",
                        help="worker counts, comma-separated (default: one gang on every "
                             "node not held as a spare)")
    parser.add_argument("--job", type=Path, help="a TrainingJob YAML whose spec every job "
                                                 "uses (its workers, topology, policies)")
    parser.add_argument("--job-hours", type=float,
                        help="training each job needs; a finished job is followed by "
                             "another (default: jobs run to the end)")
    parser.add_argument("--trace", type=Path,
                        help="replay failures from JSON lines {time, node, kind}")
    parser.add_argument("--rate-scale", type=float, default=1.0,
                        help="every failure rate times this (default: %(default)s)")
    parser.add_argument("--failure", action="append", default=[], metavar="KEY=VALUE",
                        help="rate.CAUSE=per-day or repair.CAUSE=hours, CAUSE one of "
                             "accelerator, sdc, host, network, crash, hang (repeatable)")
    parser.add_argument("--cost", action="append", default=[], metavar="NAME=SECONDS",
                        help=f"a duration the simulator supplies: {', '.join(COSTS)} "
                             "(repeatable)")
    parser.add_argument("--in-memory", action="store_true",
                        help="model in-memory checkpoints restored from a peer (costs "
                             "memory-save-seconds, memory-load-seconds: assumptions)")
    parser.add_argument("--notices", type=float, default=0.0, metavar="SHARE",
                        help="the share of node failures that come with notice "
                             "(notice-lead-seconds ahead, default 120); default 0")
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help="policies to compare (default: %(default)s; also kueue-30s: "
                             "Kueue's hot swap with TASReplaceNodeOnPodTermination off)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes to run the simulations on (default: all CPUs)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument("--svg", type=Path, help="write goodput against spares (SVG) here")


def _pairs(items: list[str], what: str) -> dict[str, float]:
    found = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            found[key.strip()] = float(value)
        except ValueError:
            raise ValueError(f"bad {what} {item!r}: write KEY=NUMBER") from None
    return found


def scenario_of(args: argparse.Namespace) -> Scenario:
    model = FailureModel(scale=args.rate_scale).with_overrides(_pairs(args.failure,
                                                                      "--failure"))
    costs = {}
    for key, value in _pairs(args.cost, "--cost").items():
        if key not in COSTS:
            raise ValueError(f"unknown --cost {key!r}: one of {', '.join(COSTS)}")
        costs[COSTS[key]] = value
    try:
        jobs = [int(n) for n in args.jobs.split(",") if n.strip()]
    except ValueError:
        raise ValueError(f"bad --jobs {args.jobs!r}: worker counts, e.g. 512,512,256") from None
    if any(n < 1 for n in jobs):
        raise ValueError("--jobs: every job needs at least one worker")
    if args.days <= 0:
        raise ValueError("--days must be positive")
    if not 0.0 <= args.notices <= 1.0:
        raise ValueError("--notices is a share of node failures, between 0 and 1")
    return Scenario(load_fleet(args.fleet), days=args.days, jobs=jobs,
                    job_hours=args.job_hours,
                    job_document=read_job(args.job) if args.job else None, model=model,
                    costs=Costs(**costs, in_memory=args.in_memory,
                                notice_fraction=args.notices),
                    seed=args.seed, trace=args.trace)


def run_plan(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    try:
        scenario = scenario_of(args)
        names = tuple(n.strip() for n in args.policies.split(",") if n.strip())
        known = tuple(policies(Costs()))
        unknown = sorted(set(names) - set(known))
        if unknown:
            raise ValueError(f"unknown policies {unknown}: choose from {', '.join(known)}")
        result = plan(scenario, names, workers=max(1, args.workers))
    except (ValueError, OSError, FleetError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.svg:
        points = [(per_domain * len(scenario.fleet.nodes) // scenario.fleet.group
                   .nodes_per_domain + per_group, 100 * choice.goodput)
                  for per_domain, per_group, choice in result.spares]
        args.svg.write_text(line_chart(f"Goodput vs spare nodes ({scenario.fleet.name})",
                                       "spare nodes", {"ours": points}))
    if args.json:
        print(json.dumps(as_json(result), indent=1))
    else:
        print("\n".join(describe(result)))
        print(f"\n({time.perf_counter() - started:.1f}s)")
    return 0


def as_json(result: Any) -> dict[str, Any]:
    return {
        "fleet": result.scenario.fleet.name, "days": result.scenario.days,
        "failures": result.failures, "expectedDown": round(result.expected_down, 2),
        "spares": {"perDomain": result.best_spares[0], "perGroup": result.best_spares[1]},
        "checkpointIntervalSeconds": round(result.best_interval, 1),
        "youngDalySeconds": round(result.young_daly, 1), "mtbfSeconds": round(result.mtbf, 1),
        "goodputPerSecondOfDetection": result.detection_cost,
        "goodputPerSecondOfRestart": result.restart_cost,
        "policies": {name: {"goodput": round(r.result.goodput, 5),
                            "jobGoodput": round(r.result.job_goodput, 5)}
                     for name, r in result.policies.items()},
        "sparesTried": [{"perDomain": d, "perGroup": g, "goodput": round(c.goodput, 5)}
                        for d, g, c in result.spares],
        "intervalsTried": [{"seconds": round(i, 1), "goodput": round(c.goodput, 5)}
                           for i, c in result.intervals]}
