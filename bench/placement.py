"""Placement benchmark: our engine against three baselines on the same trace and fleets.

    python -m bench.placement [--quick] [--json] [--fleet FILE [--pool P]] [--trace FILE]
                              [--seed N] [--sizes N...] [--kinds K...]

Fleets of about 1k, 10k, 100k and 1M accelerators, each as Trn2 UltraServers (4 nodes x 16
chips), as GB200 NVL72 domains (18 x 4 GPUs) and as Trn3 Gen2 UltraServers (36 x 4 chips),
16 domains per network block; or a SimulatedFleet file. A seeded arrival/departure trace
of mixed job sizes (a fraction of a node up to an eighth of the fleet; about 8% with a
leader pod beside the workers, 6% of the multi-domain gangs balanced, 6% in slices of half
an UltraServer or 16 nodes of a rack),
or a trace file of JSON lines {"t", "op": "submit"|"finish", "job", "workers",
"acceleratorsPerWorker", "unit", "policy", and optionally "balance", "slice",
"leaderAccelerators"}.

Every engine gets the same admission rule: a placement that breaks a `required`
constraint, an even split, a slice or a leader's level is a rejection (the job would
wait). Rejected jobs are dropped. Reported per
fleet and engine: p50/p99 solve time, jobs placed before the first rejection, mean
domains spanned above the minimum, and at the end of the trace the whole free domains and
the largest gang of whole-node workers that still fits in the fewest domains.

End states of independent replays are not comparable when the engines admitted different
jobs (first-fit and spread reject most `required` gangs and end with an emptier fleet),
so the end-state comparison with each baseline is also made by a paired replay: a job
runs only if both engines place it, both fleets hold the same jobs throughout, and any
difference is packing alone. Model build time is reported separately.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import random
import resource
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.baselines import BASELINES, Engine
from goodput_operator.topology.model import Fleet, GroupShape, trainingjob_owner
from goodput_operator.topology.placement import (
    Companion,
    Placement,
    Policy,
    Request,
    Unit,
    commit,
    is_pristine,
    place,
)

US, CLIQUE = "topology.k8s.aws/ultraserver-id", "nvidia.com/gpu.clique"
L1, L2 = "topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2"
KINDS = {  # name: (domain label, nodes per domain, accelerators per node, resource, noun)
    "trn2": (US, 4, 16, "aws.amazon.com/neuron", "UltraServer"),
    "nvl72": (CLIQUE, 18, 4, "nvidia.com/gpu", "NVLink domain"),
    # Trn3 Gen2: 36 servers x 4 chips (144) per UltraServer, the widest domain: a gang of a
    # few nodes leaves most of one free, and whole-domain gangs need 36 free nodes in one
    "trn3g2": (US, 36, 4, "aws.amazon.com/neuron", "UltraServer"),
}
SIZES = (1_000, 10_000, 100_000, 1_000_000)
# nodes per domain -> slice size: half an UltraServer (Trn2, Trn3 Gen2); 16 of an NVL72 rack
SLICE = {4: 2, 18: 16, 36: 18}
DOMAINS_PER_BLOCK = 16


def fleet_nodes(kind: str, domains: int) -> tuple[GroupShape, list[dict[str, Any]]]:
    label, per_domain, per_node, resource_name, noun = KINDS[kind]
    shape = GroupShape(label, per_domain, per_node, resource_name, (L1, L2), domain_noun=noun)
    nodes = []
    for d in range(domains):
        for s in range(per_domain):
            nodes.append({
                "metadata": {"name": f"{kind}-{d:06d}-{s:02d}", "labels": {
                    label: f"{kind}-d{d:06d}", L1: "spine",
                    L2: f"block-{d // DOMAINS_PER_BLOCK:05d}"}},
                "status": {"allocatable": {resource_name: str(per_node)},
                           "conditions": [{"type": "Ready", "status": "True"}]},
            })
    return shape, nodes


def file_fleet(path: str, pool_name: str | None = None
               ) -> tuple[str, GroupShape, list[dict[str, Any]]]:
    """A SimulatedFleet file's (or built-in fleet's) pool as the engines' fleet: POOL_NAME,
    else its first pool."""
    from goodput_operator.sandbox import fleet as simulated

    loaded = simulated.load(path)
    pools = {p.name: p for p in loaded.spec.pools}
    if pool_name is not None and pool_name not in pools:
        raise SystemExit(f"{path} has no pool {pool_name!r} (pools: {', '.join(pools)})")
    pool = pools[pool_name] if pool_name else loaded.spec.pools[0]
    resource_name = next(k for k in pool.capacity if "/" in k and "efa" not in k)
    shape = GroupShape(pool.domain_label or "topology.k8s.aws/network-node-layer-3",
                       pool.nodes_per_domain, int(pool.capacity[resource_name]), resource_name,
                       (simulated.NETWORK_LAYER_LABELS[0], simulated.NETWORK_LAYER_LABELS[1]))
    nodes = []
    for node in simulated.pool_nodes(loaded, pool):
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        nodes.append(node)
    return f"{loaded.name}/{pool.name}", shape, nodes


@dataclass(frozen=True)
class Event:
    t: float
    op: str
    job: str
    request: Request | None = None


def generate_trace(shape: GroupShape, domains: int, jobs: int, seed: int) -> list[Event]:
    """Mixed sizes: partial nodes, 1-2 nodes, part of a domain, whole domains, and gangs of
    up to an eighth of the fleet (log-uniform); offered load about 95% of the fleet."""
    rng = random.Random(seed)
    per_node = shape.accelerators_per_node
    nodes_per_domain = shape.nodes_per_domain
    biggest = max(2, domains // 8)

    def draw() -> tuple[Request, float]:
        request, size = plain()
        roll = rng.random()  # issue 19's request kinds, on a share of the gangs
        if roll < 0.08 and request.unit != "node":  # a leader beside its workers
            leader = Companion("leader", 1, rng.choice([0, 1]))
            return dataclasses.replace(request, companions=(leader,)), size
        if roll < 0.14 and request.workers > nodes_per_domain:  # spread evenly
            return dataclasses.replace(request, balance=True), size
        slice_ = SLICE.get(nodes_per_domain, 0)
        if roll < 0.20 and slice_ and request.workers % slice_ == 0 and \
                request.workers > slice_:  # slices of a domain each
            return dataclasses.replace(request, slice=slice_), size
        return request, size

    def plain() -> tuple[Request, float]:
        roll = rng.random()
        if roll < 0.10:
            accelerators = per_node // rng.choice([2, 4])
            return Request(rng.choice([1, 2, 4]), accelerators, "node", "preferred"), 0.5
        if roll < 0.35:
            return Request(rng.choice([1, 2]), per_node, "domain", "required"), 1.5
        if roll < 0.55:
            workers = rng.randint(2, max(2, nodes_per_domain - 1))
            return Request(workers, per_node, "domain", "required"), workers
        if roll < 0.75:
            return Request(nodes_per_domain, per_node, "domain", "required"), nodes_per_domain
        count = round(math.exp(rng.uniform(math.log(2), math.log(biggest))))
        policy: Policy = "required" if rng.random() < 0.8 else "preferred"
        unit: Unit = "block" if count <= DOMAINS_PER_BLOCK and rng.random() < 0.2 else "domain"
        return Request(count * nodes_per_domain, per_node, unit, policy), count * nodes_per_domain

    samples = [draw() for _ in range(jobs)]
    mean_nodes = statistics.fmean(size for _, size in samples)
    capacity = domains * nodes_per_domain
    mean_duration = 100.0
    rate = 0.95 * capacity / (mean_nodes * mean_duration)
    events: list[Event] = []
    t = 0.0
    for i, (request, _) in enumerate(samples):
        t += rng.expovariate(rate)
        job = f"job{i}"
        events.append(Event(t, "submit", job, request))
        events.append(Event(t + rng.expovariate(1 / mean_duration), "finish", job))
    horizon = t  # the trace ends at the last arrival; later departures do not happen
    return sorted((e for e in events if e.t <= horizon), key=lambda e: (e.t, e.op != "finish"))


def read_trace(path: str) -> list[Event]:
    events = []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        request = None
        if row["op"] == "submit":
            unit, policy = row.get("unit", "domain"), row.get("policy", "required")
            if unit not in ("node", "domain", "block") or policy not in ("required", "preferred"):
                raise SystemExit(f"{path}: job {row['job']}: unit must be node|domain|block "
                                 f"and policy required|preferred, got {unit!r}, {policy!r}")
            leader = row.get("leaderAccelerators")
            request = Request(int(row["workers"]), int(row["acceleratorsPerWorker"]), unit,
                              policy, balance=bool(row.get("balance", False)),
                              slice=int(row.get("slice", 1)),
                              companions=() if leader is None else
                              (Companion("leader", 1, int(leader)),))
        events.append(Event(float(row["t"]), row["op"], str(row["job"]), request))
    return sorted(events, key=lambda e: (e.t, e.op != "finish"))


def admissible(fleet: Fleet, request: Request, placed: Placement) -> bool:
    """Whether PLACED honours REQUEST: required units, an even split, whole slices each
    in one domain, every companion pod near its workers."""
    if not placed.ok or not _honours_kinds(fleet, request, placed):
        return False
    if request.policy == "required" and request.unit == "domain":
        return len(placed.domains) <= placed.min_domains
    if request.policy == "required" and request.unit == "block":
        return len({fleet.domains[d].path for d in placed.domains}) == 1
    return True


def _honours_kinds(fleet: Fleet, request: Request, placed: Placement) -> bool:
    counts = Counter(r.domain for r in placed.ranks)
    if request.balance and max(counts.values()) - min(counts.values()) > 1:
        return False
    if request.slice > 1 and any(
            len({r.domain for r in placed.ranks[i:i + request.slice]}) != 1
            for i in range(0, len(placed.ranks), request.slice)):
        return False
    if request.companions:
        wanted = Counter({c.name: c.count for c in request.companions})
        near = {c.name: c.near for c in request.companions}
        blocks = {fleet.domains[d].path for d in counts}
        if Counter(c.name for c in placed.companions) != wanted or any(
                (near[c.name] == "domain" and c.domain not in counts) or
                (near[c.name] == "block" and fleet.domains[c.domain].path not in blocks)
                for c in placed.companions):
            return False
    return True


def owner_of(job: str) -> str:
    """A trace job as the fleet records its pods: a TrainingJob's (not a foreign pod's,
    which placement's explanations list one by one)."""
    return trainingjob_owner("bench", job)


def commit_all(fleet: Fleet, placed: Placement, request: Request, owner: str) -> None:
    """The ranks and the companion pods that hold accelerators."""
    commit(fleet, placed, request, owner)
    chips = {c.name: c.accelerators for c in request.companions}
    for slot in placed.companions:
        if chips[slot.name]:
            fleet.bind(f"{owner}#{slot.name}-{slot.ordinal}", slot.node, chips[slot.name],
                       owner)


@dataclass
class Outcome:
    engine: str
    solve_ms: list[float] = field(default_factory=list)
    # per solve, whether the cyclic GC made a full (generation 2) collection during it:
    # its pause walks the whole process's live objects (at 1M accelerators, the fleet's
    # pod records), whichever engine happens to be solving
    full_gc: list[bool] = field(default_factory=list)
    placed: int = 0
    rejected: int = 0
    placed_before_first_rejection: int | None = None
    extra_domains: list[int] = field(default_factory=list)
    whole_free_domains: int = 0
    largest_gang: int = 0

    def summary(self) -> dict[str, Any]:
        times = sorted(self.solve_ms)
        clean = sorted(ms for ms, full in zip(self.solve_ms, self.full_gc, strict=True)
                       if not full)
        return {
            "engine": self.engine,
            "p50_ms": _quantile(times, 0.5),
            "p99_ms": _quantile(times, 0.99),
            "solves_with_full_gc": sum(self.full_gc),
            "p99_ms_without_full_gc": _quantile(clean, 0.99),
            "placed": self.placed, "rejected": self.rejected,
            "placed_before_first_rejection": (self.placed_before_first_rejection
                                              if self.placed_before_first_rejection is not None
                                              else self.placed),
            "mean_extra_domains": round(statistics.fmean(self.extra_domains), 4)
            if self.extra_domains else 0.0,
            "whole_free_domains": self.whole_free_domains,
            "largest_gang": self.largest_gang,
        }



def _quantile(ordered: list[float], q: float) -> float:
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))], 3) if ordered else 0.0


def replay(name: str, engine: Engine, fleet: Fleet, events: list[Event]) -> Outcome:
    outcome = Outcome(name)
    running: set[str] = set()
    collections: list[int] = []

    def full_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            collections.append(1)
    gc.callbacks.append(full_collection)
    try:
        _replay(outcome, engine, fleet, events, running, collections)
    finally:
        gc.callbacks.remove(full_collection)
    return outcome


def _replay(outcome: Outcome, engine: Engine, fleet: Fleet, events: list[Event],
            running: set[str], collections: list[int]) -> None:
    for event in events:
        if event.op == "finish":
            if event.job in running:
                fleet.release_owner(owner_of(event.job))
                running.discard(event.job)
            continue
        assert event.request is not None
        seen = len(collections)
        started = time.perf_counter()
        placed = engine(fleet, event.request)
        outcome.solve_ms.append((time.perf_counter() - started) * 1000)
        outcome.full_gc.append(len(collections) > seen)
        if admissible(fleet, event.request, placed):
            commit_all(fleet, placed, event.request, owner_of(event.job))
            running.add(event.job)
            outcome.placed += 1
            outcome.extra_domains.append(len(placed.domains) - placed.min_domains)
        else:
            outcome.rejected += 1
            if outcome.placed_before_first_rejection is None:
                outcome.placed_before_first_rejection = outcome.placed
    outcome.whole_free_domains = whole_free_domains(fleet)
    outcome.largest_gang = largest_gang(fleet)


def paired(engines: list[tuple[Engine, Fleet]], events: list[Event]) -> list[tuple[int, int]]:
    """Replay where a job is admitted only if every engine can place it, so all fleets
    hold the same jobs throughout: end-state differences are packing alone.
    Returns (whole free domains, largest gang) per engine."""
    running: set[str] = set()
    for event in events:
        if event.op == "finish":
            if event.job in running:
                for _, fleet in engines:
                    fleet.release_owner(owner_of(event.job))
                running.discard(event.job)
            continue
        assert event.request is not None
        placements = [engine(fleet, event.request) for engine, fleet in engines]
        if all(admissible(fleet, event.request, p)
               for (_, fleet), p in zip(engines, placements, strict=True)):
            for (_, fleet), p in zip(engines, placements, strict=True):
                commit_all(fleet, p, event.request, owner_of(event.job))
            running.add(event.job)
    return [(whole_free_domains(fleet), largest_gang(fleet)) for _, fleet in engines]


def whole_free_domains(fleet: Fleet) -> int:
    return sum(1 for d in fleet.domains.values()
               if is_pristine(d) and all(n.healthy for n in d.nodes)
               and len(d.nodes) == fleet.shape.nodes_per_domain)


def largest_gang(fleet: Fleet) -> int:
    """The most whole-node workers one gang could still get in the fewest domains
    (the same yardstick for every engine's end state)."""
    low, high = 0, sum(1 for n in fleet.nodes.values() if n.usable and n.used == 0)
    per_node = fleet.shape.accelerators_per_node
    while low < high:
        mid = (low + high + 1) // 2
        if place(fleet, Request(mid, per_node, "domain", "required")).ok:
            low = mid
        else:
            high = mid - 1
    return low


def run_fleet(label: str, shape: GroupShape, nodes: list[dict[str, Any]], events: list[Event],
              domains: int) -> dict[str, Any]:
    started = time.perf_counter()
    ours_fleet = Fleet.from_objects(shape, nodes)
    build_s = time.perf_counter() - started
    engines: list[tuple[str, Engine, Fleet]] = [("ours", place, ours_fleet)]
    for name, factory in BASELINES.items():
        fleet = Fleet.from_objects(shape, nodes)
        engines.append((name, factory(fleet), fleet))
    # Millions of long-lived model objects: without this a generation-2 collection of the
    # cyclic GC lands inside some solves (hundreds of ms at 1M accelerators), whichever
    # engine happens to be running. The same for every engine.
    gc.collect()
    gc.freeze()
    outcomes = [replay(name, engine, fleet, events) for name, engine, fleet in engines]
    summaries = [o.summary() for o in outcomes]
    ours = summaries[0]
    ratios, pairs = {}, {}
    for base, (name, factory) in zip(summaries[1:], BASELINES.items(), strict=True):
        mine, theirs = Fleet.from_objects(shape, nodes), Fleet.from_objects(shape, nodes)
        (our_free, our_gang), (base_free, base_gang) = paired(
            [(place, mine), (factory(theirs), theirs)], events)
        pairs[name] = {"ours_whole_free_domains": our_free, "base_whole_free_domains": base_free,
                       "ours_largest_gang": our_gang, "base_largest_gang": base_gang}
        ratios[name] = {
            "p99_ms": _ratio(ours["p99_ms"], base["p99_ms"]),
            "placed_before_first_rejection": _ratio(ours["placed_before_first_rejection"],
                                                    base["placed_before_first_rejection"]),
            "mean_extra_domains": _ratio(ours["mean_extra_domains"], base["mean_extra_domains"]),
            "paired_whole_free_domains": _ratio(our_free, base_free),
            "paired_largest_gang": _ratio(our_gang, base_gang),
        }
    accelerators = domains * shape.nodes_per_domain * shape.accelerators_per_node
    return {"fleet": label, "domains": domains, "nodes": len(nodes),
            "accelerators": accelerators, "jobs": sum(e.op == "submit" for e in events),
            "model_build_s": round(build_s, 3), "engines": summaries, "paired": pairs,
            "ratios": ratios}


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def plan(quick: bool, only: list[int] | None = None, kinds: list[str] | None = None
         ) -> Iterator[tuple[str, int, int]]:
    sizes = only or (SIZES[:3] if quick else SIZES)
    for size in sizes:
        for kind in kinds or KINDS:
            _, per_domain, per_node, _, _ = KINDS[kind]
            domains = max(1, round(size / (per_domain * per_node)))
            jobs = (400 if size <= 10_000 else 600) if quick else (1500 if size < 10**6 else 1000)
            yield kind, domains, jobs


def render(results: list[dict[str, Any]]) -> str:
    lines = ["| fleet | accel. | engine | p50 ms | p99 ms | p99 ms without a full GC "
             "(solves with one) | placed before 1st reject | placed | extra domains | whole "
             "free domains (end) | largest gang (end) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for result in results:
        for row in result["engines"]:
            lines.append(
                f"| {result['fleet']} | {result['accelerators']:,} | {row['engine']} | "
                f"{row['p50_ms']} | {row['p99_ms']} | {row['p99_ms_without_full_gc']} "
                f"({row['solves_with_full_gc']}) | {row['placed_before_first_rejection']} | "
                f"{row['placed']} | {row['mean_extra_domains']} | {row['whole_free_domains']} | "
                f"{row['largest_gang']} |")
    lines += ["", "Paired replay (a job runs only if both engines place it, so both fleets hold "
              "the same jobs) and ratios, ours / baseline. Time and extra domains: lower is "
              "better; the rest: higher is better.", "",
              "| fleet | baseline | whole free domains ours/base | largest gang ours/base | "
              "p99 time | placed before 1st reject | extra domains | whole free domains | "
              "largest gang |", "|---|---|---|---|---|---|---|---|---|"]
    for result in results:
        for base, ratio in result["ratios"].items():
            pair = result["paired"][base]
            lines.append(
                f"| {result['fleet']} | {base} | {pair['ours_whole_free_domains']}/"
                f"{pair['base_whole_free_domains']} | {pair['ours_largest_gang']}/"
                f"{pair['base_largest_gang']} | {ratio['p99_ms']} | "
                f"{ratio['placed_before_first_rejection']} | {ratio['mean_extra_domains']} | "
                f"{ratio['paired_whole_free_domains']} | {ratio['paired_largest_gang']} |")
    lines += ["", "Model build (Fleet.from_objects from Node dicts), seconds: " + ", ".join(
        f"{r['fleet']} {r['model_build_s']}" for r in results)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1k-100k fleets, shorter traces")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--fleet", help="a SimulatedFleet YAML file (or a built-in fleet's "
                        "name) instead of the sizes")
    parser.add_argument("--pool", help="with --fleet: which of its pools (default: the first)")
    parser.add_argument("--trace", help="a JSON-lines trace instead of the generated one")
    parser.add_argument("--seed", type=int, default=20261126)
    parser.add_argument("--sizes", type=int, nargs="+", choices=SIZES,
                        help="only these fleet sizes (accelerators)")
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS),
                        help="only these fleet kinds")
    args = parser.parse_args(argv)
    results = []
    if args.fleet:
        label, shape, nodes = file_fleet(args.fleet, args.pool)
        domains = len({n["metadata"]["labels"].get(shape.domain_label) for n in nodes})
        events = (read_trace(args.trace) if args.trace
                  else generate_trace(shape, domains, 400, args.seed))
        results.append(run_fleet(label, shape, nodes, events, domains))
    else:
        for kind, domains, jobs in plan(args.quick, args.sizes, args.kinds):
            shape, nodes = fleet_nodes(kind, domains)
            events = (read_trace(args.trace) if args.trace
                      else generate_trace(shape, domains, jobs, args.seed))
            accelerators = domains * shape.nodes_per_domain * shape.accelerators_per_node
            print(f"# {kind} {accelerators:,} accelerators: {len(events)} events",
                  file=sys.stderr, flush=True)
            results.append(run_fleet(f"{kind}-{accelerators // 1000}k", shape, nodes, events,
                                     domains))
            del nodes
            gc.unfreeze()
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(render(results))
    print(f"\nPeak RSS {peak_mib:.0f} MiB (all fleets, four engines' copies each).")
    if args.json:
        print(json.dumps({"results": results, "peak_rss_mib": round(peak_mib)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

