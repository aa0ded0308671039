"""The planner: for a fleet, a workload and a failure model, the spares and checkpoint
interval that maximise goodput under the operator's policy, what each second of detection
or restart costs, and the baselines beside it. `goodput plan` prints it."""

from __future__ import annotations

import dataclasses
import math
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

from goodput_operator.simulate.engine import Result
from goodput_operator.simulate.failures import DAY, Failure
from goodput_operator.simulate.policies import Costs, young_daly
from goodput_operator.simulate.scenario import POLICIES, Run, Scenario, run

INTERVAL_FACTORS = (0.5, 1.0, 2.0)  # times the Young/Daly interval, first
REFINE = (2 ** -0.5, 2 ** 0.5)  # then times the best of those
SPARE_FACTORS = (0.0, 0.5, 1.0, 1.5, 2.0)  # times the nodes expected to be down
NUDGE = 10.0  # seconds added to detection or restart to measure their price


@dataclass(frozen=True)
class Choice:
    label: str
    goodput: float
    job_goodput: float


@dataclass
class Plan:
    scenario: Scenario
    failures: int
    expected_down: float  # nodes down at a time, on average (failures x repair)
    young_daly: float  # seconds, for the recommended fleet's job
    mtbf: float  # seconds between failures that interrupt that job
    spares: list[tuple[int, int, Choice]] = field(default_factory=list)  # per dom, group
    intervals: list[tuple[float, Choice]] = field(default_factory=list)
    best_spares: tuple[int, int] = (0, 0)
    best_interval: float = 0.0
    detection_cost: float = 0.0  # goodput lost per second of detection
    restart_cost: float = 0.0  # per second of restart
    policies: dict[str, Run] = field(default_factory=dict)


def expected_down(scenario: Scenario) -> float:
    """Nodes out of service at a time, on average: each cause that loses nodes, at its
    rate, for its repair time (a domain failure loses the whole domain)."""
    fleet = scenario.fleet
    nodes, per_domain = len(fleet.nodes), fleet.group.nodes_per_domain
    down = 0.0
    for cause in scenario.model.causes:
        if cause.effect not in ("node", "domain", "sdc"):
            continue
        units = nodes * (fleet.per_node if cause.per == "accelerator" else 1)
        struck = per_domain if cause.effect == "domain" else 1
        down += scenario.model.scale * cause.rate * units / DAY * struck * \
            cause.repair_hours * 3600.0
    return down


def _choice(label: str, result: Result) -> Choice:
    return Choice(label, result.goodput, result.job_goodput)


Trial = tuple[tuple[int, int], Costs, str]  # spares (per domain, per group), costs, policy
_BASE: list[tuple[Scenario, list[Failure]]] = []  # what forked workers share, not pickled


def _trial(trial: Trial) -> Run:
    scenario, failures = _BASE[-1]
    spares, costs, policy = trial
    scenario = dataclasses.replace(scenario, fleet=scenario.fleet.with_spares(*spares),
                                   costs=costs)
    return run(scenario, (policy,), failures)[policy]


class _Runner:
    """Runs trials of one scenario, over WORKERS forked processes that share it."""

    def __init__(self, scenario: Scenario, failures: list[Failure], workers: int) -> None:
        _BASE.append((scenario, failures))
        self.pool = ProcessPoolExecutor(workers, mp_context=get_context("fork")) \
            if workers > 1 else None

    def __call__(self, trials: list[Trial]) -> list[Run]:
        if self.pool is None or len(trials) <= 1:
            return [_trial(t) for t in trials]
        return list(self.pool.map(_trial, trials))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
        _BASE.pop()


def _plus(costs: Costs, **fields: Any) -> Costs:
    return dataclasses.replace(costs, **fields)


def plan(scenario: Scenario, policies: tuple[str, ...] = POLICIES,
         workers: int = 1) -> Plan:
    """The plan, its runs spread over WORKERS processes."""
    failures = scenario.failures()
    runner = _Runner(scenario, failures, workers)
    try:
        return _plan(scenario, failures, policies, runner)
    finally:
        runner.close()


def _try_intervals(result: Plan, runner: _Runner, costs: Costs, intervals: list[float]
                   ) -> None:
    """Run INTERVALS (at least a second each) at the recommended spares: each goes into
    RESULT's table (kept in order), and the best of all tried so far is its interval."""
    intervals = [max(1.0, i) for i in intervals]
    outcomes = runner([(result.best_spares, _plus(costs, interval=i), "ours")
                       for i in intervals])
    for interval, outcome in zip(intervals, outcomes, strict=True):
        result.intervals.append((interval, _choice(f"{interval:.0f}s", outcome.result)))
    result.intervals.sort(key=lambda i: i[0])
    result.best_interval = max(result.intervals, key=lambda i: i[1].goodput)[0]


def _plan(scenario: Scenario, failures: list[Failure], policies: tuple[str, ...],
          runner: _Runner) -> Plan:
    down = expected_down(scenario)
    result = Plan(scenario, sum(1 for f in failures if f.time >= 0), down, 0.0, 0.0)
    fleet, costs = scenario.fleet, scenario.costs
    # 1. spares: a pool for the whole group sized from the nodes expected down, and (for
    # domains of several nodes) one per domain, which keeps a replacement in its domain
    # (a gang on every node but the spares cannot be whole while a node is out without
    # one: no spares is tried only for a workload of several jobs)
    factors = SPARE_FACTORS if scenario.jobs else [f for f in SPARE_FACTORS if f > 0]
    candidates = sorted({(0, math.ceil(down * f)) for f in factors})
    if fleet.group.nodes_per_domain > 1:
        candidates.append((1, 0))
    outcomes = runner([(spares, costs, "ours") for spares in candidates])
    for spares, outcome in zip(candidates, outcomes, strict=True):
        result.spares.append((*spares, _choice(f"{spares[0]}/domain + {spares[1]}/group",
                                               outcome.result)))
    best = max(result.spares, key=lambda s: s[2].goodput)
    result.best_spares = best[:2]
    chosen = dataclasses.replace(scenario, fleet=fleet.with_spares(*result.best_spares))
    # 2. checkpoint interval around Young/Daly's optimum
    job = chosen.make_jobs()[0]
    accelerators = job.spec.workers * job.spec.accelerators_per_worker
    result.mtbf = scenario.model.mtbf(accelerators, job.spec.workers)
    result.young_daly = young_daly(costs.snapshot_seconds, result.mtbf)
    if math.isfinite(result.young_daly):
        # a coarse grid, then the two points halfway (geometrically) to the best's
        # neighbours: five runs, the optimum bracketed within a factor of sqrt(2)
        _try_intervals(result, runner, costs, [result.young_daly * f for f in INTERVAL_FACTORS])
        _try_intervals(result, runner, costs, [result.best_interval * f for f in REFINE])
    else:
        result.best_interval = scenario.horizon
    tuned = _plus(costs, interval=costs.interval or result.best_interval)
    # 3. the policies side by side, and the price of a second: detection and restart each
    # NUDGE seconds slower
    trials = [(result.best_spares, tuned, name) for name in (*policies, "ours")]
    trials += [(result.best_spares, _plus(tuned, pass_seconds=tuned.pass_seconds + NUDGE),
                "ours"),
               (result.best_spares, _plus(tuned, pod_start_seconds=tuned.pod_start_seconds
                                          + NUDGE), "ours")]
    if "ours" in policies:
        trials.pop(len(policies))  # ours is among the policies already
    outcomes = runner(trials)
    result.policies = dict(zip(policies, outcomes, strict=False))
    base, slower_detection, slower_restart = outcomes[-3:] if "ours" not in policies else \
        (result.policies["ours"], *outcomes[-2:])
    result.detection_cost = (base.result.goodput - slower_detection.result.goodput) / NUDGE
    result.restart_cost = (base.result.goodput - slower_restart.result.goodput) / NUDGE
    return result


def _pct(value: float) -> str:
    return f"{100 * value:.2f}%"


def table(runs: dict[str, Run]) -> list[str]:
    """Policies side by side: goodput, the books' badput by phase, jobs, idle."""
    buckets = ("detection", "replacement", "restart", "lostWork", "checkpoint", "launch")
    head = ["policy", "goodput", "job goodput", *buckets, "incidents", "jobs done", "idle"]
    rows = [head]
    for name, outcome in runs.items():
        r = outcome.result
        idle = max(0.0, r.paid - r.held - r.down) / r.paid
        rows.append([name, _pct(r.goodput), _pct(r.job_goodput),
                     *(_pct(r.lost.get(b, 0.0) / r.paid) for b in buckets),
                     str(r.incidents), str(r.completed), _pct(idle)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return ["  ".join(cell.rjust(w) if i else cell.ljust(w)
                      for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
            for row in rows]


def assumptions(costs: Costs) -> list[str]:
    """The modelled features that are assumptions, said beside the result they change."""
    found = []
    if costs.in_memory:
        found.append(f"Assumed: in-memory checkpoints (a {costs.memory_save_seconds:g}s "
                     f"snapshot to host memory, a {costs.memory_load_seconds:g}s restore from "
                     "a peer's; the durable copy written in the background) - not measured "
                     "here: the operator does not keep them yet.")
    if costs.notice_fraction:
        found.append(f"Assumed: {costs.notice_fraction:.0%} of node failures announced "
                     f"{costs.notice_lead_seconds:g}s ahead; the operator saves the gang and "
                     "moves the rank first (the baselines let the node fail).")
    return found


def describe(result: Plan) -> list[str]:
    """The plan as a platform team reads it."""
    scenario, fleet = result.scenario, result.scenario.fleet
    per_domain, per_group = result.best_spares
    ours = result.policies.get("ours")
    per_day = scenario.model.per_day(fleet.accelerators, len(fleet.nodes))
    lines = [
        f"fleet {fleet.name}: {len(fleet.nodes)} nodes, {fleet.accelerators} accelerators, "
        f"{fleet.group.nodes_per_domain} nodes a domain; {scenario.days:g} days; "
        f"{result.failures} failures drawn ({per_day:.1f}/day); "
        f"{result.expected_down:.1f} nodes down at a time on average",
        "",
        f"Recommendation: hold {per_domain} spare(s) per domain and {per_group} for the "
        f"group; checkpoint every {result.best_interval:.0f}s of training "
        f"(Young/Daly: sqrt(2 x {scenario.costs.snapshot_seconds:g}s save x "
        f"{result.mtbf:.0f}s MTBF) = {result.young_daly:.0f}s).",
        *assumptions(scenario.costs),
    ]
    if ours is not None:
        lines.append(f"Expected goodput: {_pct(ours.result.goodput)} of the fleet "
                     f"({_pct(ours.result.job_goodput)} of the job's time).")
    lines += [f"Each second of detection costs {_pct(result.detection_cost)} goodput; each "
              f"second of restart {_pct(result.restart_cost)}.", "", "spares (ours):"]
    lines += [f"  {c.label:28} goodput {_pct(c.goodput)}  job {_pct(c.job_goodput)}"
              for _, _, c in result.spares]
    if result.intervals:
        lines.append("checkpoint interval (ours, recommended spares):")
        lines += [f"  {c.label:28} goodput {_pct(c.goodput)}  job {_pct(c.job_goodput)}"
                  for _, c in result.intervals]
    lines += ["", "policies, recommended spares and interval (badput as % of paid):",
              *table(result.policies), "", "badput by cause (% of paid):"]
    for name, outcome in result.policies.items():
        causes = sorted(outcome.result.by_cause.items(), key=lambda c: -c[1])
        lines.append(f"  {name:11} " + (", ".join(
            f"{cause} {_pct(lost / outcome.result.paid)}" for cause, lost in causes)
            or "none"))
    return lines
