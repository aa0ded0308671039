"""Tenancy benchmark: what one tenant's objects cost everyone else's pass.

    python -m bench.tenancy [--json] [--jobs N] [--domains D] [--endpoints E] [--waiting W]

The dozen-jobs attack (issue 45, item 4): team A submits N TrainingJobs (default 12) at the
worker cap (8,192) that fit nowhere, beside team B's 2-worker job, on a Trn2 group of D
UltraServers (default 32: 128 nodes, 2,048 chips). The operator's own state (the
controllers' `State`) is filled with the objects and one whole pass is decided
(`decide.decide`), each variant in a fresh process so that its peak RSS is its own:

- quiet:    team B's job alone;
- attack:   team A's N jobs and team B's job, as the pass decides them now (an unplaced
            gang has no pods; decide.creates);
- baseline: the same, plus what the pass did before: every missing pod's body built for
            the N gangs (Missing.bodies(), the 98,000 gated pods it then created);
- endpoints: team A's E InferenceEndpoints instead (default 2,000; `--endpoints E`), each
            a replica of a whole UltraServer with 64 standby domains asked, beside team
            B's job: what thousands of one namespace's endpoints cost every pass, with
            the default turns at placement (decide.turns: 32 searches a pass for one
            namespace's waiting endpoints);
- endpoints-unbounded: the same with every waiting endpoint searched in every pass (as
            before the turns): the baseline of the endpoints variant;
- waiting:  team A's W TrainingJobs of 8 workers (default 2,000; `--waiting W`): the first
            16 fill the fleet, the others wait, searched in turns (decide.turns);
- waiting-unbounded: the same with every waiting job searched in every pass.

Reported per variant: the pass's time, the process's peak RSS, the pods the pass would
create; the ratios attack/quiet, baseline/attack, endpoints/quiet and
endpoints-unbounded/endpoints and waiting-unbounded/waiting. Also the cost of the worst quantity
the operator accepts (64 characters, exponent 24) and of a bomb it refuses
(`1e10000000`), against a plain "16", over many parses (topology.model.parse_quantity).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import subprocess
import sys
import time
from typing import Any

from goodput_operator.api.trainingjob import MAX_WORKERS
from goodput_operator.controllers.state import State
from goodput_operator.decide import decide
from goodput_operator.topology.model import QuantityError, parse_quantity

Obj = dict[str, Any]
NEURON = "aws.amazon.com/neuron"
US = "topology.k8s.aws/ultraserver-id"
L1, L2 = "topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2"
WORST_ACCEPTED = "9" * 39 + "." + "9" * 20 + "e+24"  # 64 characters, the largest exponent
BOMB = "1e10000000"


def group() -> Obj:
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
            "metadata": {"name": "trn2", "generation": 1, "uid": "g"},
            "spec": {"nodeSelector": {"pool": "trn2"}, "nodesPerDomain": 4,
                     "networkLevels": [L1, L2], "accelerator": {"resource": NEURON,
                                                                "perNode": 16},
                     "probes": {"schedule": ""}}}


def node(domain: int, slot: int) -> Obj:
    return {"metadata": {"name": f"us{domain}-n{slot}", "resourceVersion": "1",
                         "labels": {"pool": "trn2", US: f"us-{domain}", L1: "spine",
                                    L2: f"b{domain // 8}"}},
            "spec": {}, "status": {"allocatable": {NEURON: "16", "cpu": "192",
                                                   "memory": "2Ti", "pods": "110"},
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def job(namespace: str, name: str, workers: int) -> Obj:
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                         "generation": 1, "creationTimestamp": "2026-12-02T00:00:00Z",
                         "resourceVersion": "1"},
            "spec": {"ultraServerGroup": "trn2", "workers": workers,
                     "acceleratorsPerWorker": 16,
                     "template": {"spec": {"containers": [
                         {"name": "trainer", "image": "example.com/train:1",
                          "env": [{"name": "EPOCHS", "value": "90"}]}]}}},
            "status": {}}


def endpoint(namespace: str, name: str) -> Obj:
    """A replica of a whole UltraServer (4 nodes x 16 chips), 64 standby domains asked."""
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "InferenceEndpoint",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-ie-{name}",
                         "generation": 1, "creationTimestamp": "2026-12-02T00:00:00Z",
                         "resourceVersion": "1"},
            "spec": {"ultraServerGroup": "trn2", "model": {"name": "m"},
                     "replicaShape": {"workers": 4, "acceleratorsPerWorker": 16},
                     "template": {"spec": {"containers": [{"name": "s", "image": "s:1"}]}},
                     "scaling": {"minReplicas": 1, "maxReplicas": 4, "standbyDomains": 64,
                                 "metrics": [{"type": "QueueDepth", "target": 8}]}},
            "status": {}}


def one_pass(variant: str, jobs: int, domains: int, endpoints: int = 0, waiting: int = 0
             ) -> Obj:
    """One pass of VARIANT, in this process (see the module's docstring)."""
    state = State()
    if variant.endswith("-unbounded"):
        state.settings.searches_per_namespace = endpoints + waiting + 1
    state.upsert_group(group())
    for d in range(domains):
        for s in range(4):
            state.upsert_node(node(d, s))
    attackers = jobs if variant in ("attack", "baseline") else 0
    for i in range(attackers):
        state.upsert_job(job("team-a", f"capped-{i}", MAX_WORKERS))
    for i in range(endpoints if variant.startswith("endpoints") else 0):
        state.upsert_endpoint(endpoint("team-a", f"serve-{i}"))
    for i in range(waiting if variant.startswith("waiting") else 0):
        state.upsert_job(job("team-a", f"wait-{i}", 8))
    state.upsert_job(job("team-b", "train", 2))
    started = time.perf_counter()
    plan = decide(state.snapshot(time.time()))
    held: list[Obj] = []
    if variant == "baseline":  # the previous pass built every missing pod's body
        for decision in plan.jobs:
            if decision.attempt is not None and decision.attempt.missing is not None \
                    and not decision.attempt.create:
                held += decision.attempt.missing.bodies()
    seconds = time.perf_counter() - started
    phases = {d.key: d.desired.get("phase") for d in plan.jobs}
    return {"variant": variant, "seconds": seconds,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "pods": sum(len(d.attempt.create) for d in plan.jobs if d.attempt) + len(held)
            + sum(len(d.create) for d in plan.endpoints),
            "failures": len(plan.failures),
            "job_searches": sum(1 for d in plan.jobs if d.placement_seconds is not None),
            "team_b": phases[("team-b", "train")]}


def in_child(variant: str, jobs: int, domains: int, endpoints: int, waiting: int) -> Obj:
    out = subprocess.run([sys.executable, "-m", "bench.tenancy", "--child", variant,
                          "--jobs", str(jobs), "--domains", str(domains),
                          "--endpoints", str(endpoints), "--waiting", str(waiting)],
                         check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out))


def quantity_costs(repeats: int = 2000) -> Obj:
    """Microseconds per parse: a plain count, the worst accepted, the bomb refused."""
    def per_parse(text: str) -> float:
        started = time.perf_counter()
        for _ in range(repeats):
            with contextlib.suppress(QuantityError):
                parse_quantity(text)
        return (time.perf_counter() - started) / repeats * 1e6
    return {"plain_us": per_parse("16"), "worst_accepted_us": per_parse(WORST_ACCEPTED),
            "bomb_refused_us": per_parse(BOMB)}


def ratio(top: Obj, bottom: Obj) -> Obj:
    """TOP's pass time and peak RSS over BOTTOM's."""
    return {"seconds": top["seconds"] / bottom["seconds"],
            "rss": top["peak_rss_mib"] / bottom["peak_rss_mib"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--domains", type=int, default=32)
    parser.add_argument("--endpoints", type=int, default=2000)
    parser.add_argument("--waiting", type=int, default=2000)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_pass(args.child, args.jobs, args.domains, args.endpoints,
                                  args.waiting)))
        return
    runs = {v: in_child(v, args.jobs, args.domains, args.endpoints, args.waiting)
            for v in ("quiet", "attack", "baseline", "endpoints", "endpoints-unbounded",
                      "waiting", "waiting-unbounded")}
    result = {"jobs": args.jobs, "workers": MAX_WORKERS, "domains": args.domains,
              "endpoints": args.endpoints, "waiting": args.waiting, "runs": runs,
              "quantities": quantity_costs(),
              "endpoints_over_quiet": ratio(runs["endpoints"], runs["quiet"]),
              "attack_over_quiet": ratio(runs["attack"], runs["quiet"]),
              "baseline_over_attack": ratio(runs["baseline"], runs["attack"]),
              "unbounded_over_endpoints": ratio(runs["endpoints-unbounded"],
                                                runs["endpoints"]),
              "unbounded_over_waiting": ratio(runs["waiting-unbounded"], runs["waiting"])}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.jobs} jobs x {MAX_WORKERS} workers that fit nowhere (or {args.endpoints} "
          f"endpoints, or {args.waiting} waiting jobs), beside team B's job, on "
          f"{args.domains} UltraServers")
    print(f"{'variant':19} {'pass s':>9} {'peak RSS MiB':>13} {'pods':>7}  team B")
    for run in runs.values():
        print(f"{run['variant']:19} {run['seconds']:9.3f} {run['peak_rss_mib']:13.0f} "
              f"{run['pods']:7d}  {run['team_b']}")
    for key in ("attack_over_quiet", "baseline_over_attack", "endpoints_over_quiet",
                "unbounded_over_endpoints", "unbounded_over_waiting"):
        ratios = result[key]
        print(f"{key}: time x{ratios['seconds']:.1f}, peak RSS x{ratios['rss']:.2f}")
    q = result["quantities"]
    print(f"parse_quantity: '16' {q['plain_us']:.1f} us, worst accepted "
          f"{q['worst_accepted_us']:.1f} us, {BOMB!r} refused {q['bomb_refused_us']:.1f} us")


if __name__ == "__main__":
    main()
