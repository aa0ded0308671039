"""Placement, head to head with Kueue's Topology Aware Scheduling and Kubernetes' own gang
scheduling (issue 46): the same gangs, in the same order, on the same KWOK Trn2 fleet.

    python -m bench.peers_placement [--json] [--domains D] [--gangs G] [--seed N]
                                    [--no-upstream]

The fleet: `synthetic:trn2:D` (default 32 UltraServers of 4 nodes x 16 chips, 128 nodes,
in network blocks of 16). The trace: G gangs (default 48) of whole-node workers, 1 to 16
nodes, seeded, submitted one after another and never finished: about twice what the
fleet holds, so that every system must refuse some.

Both peers are asked the same: a gang stays inside one UltraServer when it fits in one,
else inside one network block (neither has a "fewest UltraServers" constraint).
- **Kueue v0.17.0, TAS** at its defaults, in the sandbox beside the control plane
  (sandbox/kueue.py), given the fleet through sandbox/peers.py: a Topology of the group's
  network levels, its UltraServer label and the hostname; a ResourceFlavor and queues
  over the same nodes. Each gang is an Indexed Job with that required topology; within
  the level TAS's own algorithm packs. Its pods keep running (the sandbox's kwok spares
  pods labelled `sandbox.goodput.dev/keep-running`). A gang counts as placed when its
  Workload is admitted; where is read from the Workload's topology assignment.
- **kube-scheduler v1.36.3's gang scheduling** (alpha: GangScheduling and
  TopologyAwareWorkloadScheduling, on in a sandbox of its own, `Sandbox.upstream_gang`):
  each gang a PodGroup (gang minCount = its workers, that one topology key) and its pods.
  A gang counts as placed when all its pods are bound within ADMIT_SECONDS; else it is
  deleted (refused).
- **Ours:** the operator's placement engine (topology.placement.place, what decide.job
  runs for a TrainingJob of unit domain, policy required: the fewest UltraServers, least
  fragmentation) on a model of the same node objects, the gangs in the same order.

Reported per system: gangs placed and their nodes, gangs placed before the first
refusal, and, over the first gangs every system placed before any refused one (the same
gangs on every fleet, so the end states differ by packing alone), UltraServers spanned
above the minimum, whole free UltraServers left, and the largest gang of whole nodes that
still fits in the fewest UltraServers (bench.placement's yardsticks); the same over the
whole trace in the JSON. Seconds from a gang's submit to its admission (Kueue) or to its
last pod bound (upstream), p50 and p99.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.placement import largest_gang, whole_free_domains
from goodput_operator.api.ultraservergroup import UltraServerGroupSpec
from goodput_operator.sandbox import cluster, kueue, peers, versions
from goodput_operator.sandbox import fleet as fleets
from goodput_operator.topology.model import Fleet, GroupShape
from goodput_operator.topology.placement import Request, commit, place

Obj = dict[str, Any]
NAMESPACE, QUEUE = "bench", "trn2"
# the fleet's blocks are its layer-2 switches; layer 3 is the UltraServer's own
L1, L2 = "topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2"
GROUP = UltraServerGroupSpec.model_validate({
    "nodeSelector": {"node.kubernetes.io/instance-type": "trn2u.48xlarge"},
    "domainLabel": "topology.k8s.aws/ultraserver-id", "networkLevels": [L1, L2],
    "accelerator": {"resource": "aws.amazon.com/neuron", "perNode": 16},
    "nodesPerDomain": 4})
SIZES = (1, 1, 2, 2, 3, 4, 4, 4, 6, 8, 8, 12, 16)  # nodes per gang, drawn at random
ADMIT_SECONDS = 8.0  # a gang Kueue has not admitted by then counts as refused (its
# admissions here took under a second; nothing frees room later: no gang finishes)


def trace(gangs: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.choice(SIZES) for _ in range(gangs)]


def model(nodes: list[Obj]) -> Fleet:
    """The fleet as the operator models it, its nodes Ready (as kwok makes them)."""
    ready = [{**n, "status": {**(n.get("status") or {}), "conditions": [
        {"type": "Ready", "status": "True"}]}} for n in nodes]
    return Fleet.from_objects(GroupShape.from_spec(GROUP), ready)


def end_state(nodes: list[Obj], placed: list[tuple[int, list[str]]]) -> Obj:
    """The yardsticks, from the gangs placed (workers, nodes) on a model of the fleet."""
    fleet = model(nodes)
    above = 0
    for i, (workers, on) in enumerate(placed):
        for rank, node in enumerate(on):
            fleet.bind(f"bench/g{i}#{rank}", node, GROUP.accelerator.per_node, f"bench/g{i}")
        spanned = len({fleet.nodes[n].domain for n in on})
        above += spanned - math.ceil(workers / GROUP.nodes_per_domain)
    return {"domains_above_minimum": above, "whole_free_domains": whole_free_domains(fleet),
            "largest_gang": largest_gang(fleet)}


Outcomes = list[list[str] | None]  # per gang, in order: the nodes it got, or None (refused)


def first_refusal(outcomes: Outcomes) -> int:
    return next((i for i, got in enumerate(outcomes) if got is None), len(outcomes))


def summary(system: str, nodes: list[Obj], sizes: list[int], outcomes: Outcomes,
            prefix: int) -> Obj:
    """SYSTEM's figures: over the whole trace, and over its first PREFIX gangs (those
    both systems placed before either refused one: the same gangs on both fleets, so
    their end states differ by packing alone)."""
    placed = [(w, got) for w, got in zip(sizes, outcomes, strict=True) if got is not None]
    return {"system": system, "placed": len(placed),
            "nodes_placed": sum(w for w, _ in placed),
            "refused": [i for i, got in enumerate(outcomes) if got is None],
            "before_first_refusal": first_refusal(outcomes),
            "end": end_state(nodes, placed),
            "paired": end_state(nodes, placed[:prefix])}


def ours(nodes: list[Obj], sizes: list[int]) -> Outcomes:
    fleet = model(nodes)
    outcomes: Outcomes = []
    for i, workers in enumerate(sizes):
        request = Request(workers, GROUP.accelerator.per_node, "domain", "required")
        found = place(fleet, request)
        outcomes.append([r.node for r in found.ranks] if found.ok else None)
        if found.ok:
            commit(fleet, found, request, f"ours/g{i}")
    return outcomes


def assigned_nodes(assignment: Obj) -> list[str]:
    """The nodes of a TAS topology assignment (v1beta2: slices of values per level, a
    value's pods counted), one entry per pod; the assignment's last level is the host."""
    nodes: list[str] = []
    for piece in assignment.get("slices") or []:
        count = int(piece.get("domainCount", 1))
        host = (piece.get("valuesPerLevel") or [{}])[-1]
        if "universal" in host:
            values = [host["universal"]] * count
        else:
            found = host.get("individual") or {}
            values = [f"{found.get('prefix', '')}{root}{found.get('suffix', '')}"
                      for root in found.get("roots") or []]
        pods = piece.get("podCounts") or {}
        counts = [int(pods["universal"])] * count if "universal" in pods else \
            [int(c) for c in (pods.get("individual") or [])]
        for value, pods_here in zip(values, counts, strict=True):
            nodes += [value] * pods_here
    return nodes


def admitted(box: cluster.Sandbox, job: str) -> list[str] | None:
    """The nodes Kueue admitted JOB's gang on, or None while it is not admitted."""
    found = json.loads(box.kubectl("get", "workloads", "-n", NAMESPACE, "-o", "json"
                                   ).stdout)["items"]
    for workload in found:
        if not any(o.get("kind") == "Job" and o.get("name") == job
                   for o in workload["metadata"].get("ownerReferences") or []):
            continue
        conditions = {c["type"]: c["status"]
                      for c in (workload.get("status") or {}).get("conditions") or []}
        if conditions.get("Admitted") == "True":
            [podset] = workload["status"]["admission"]["podSetAssignments"]
            return assigned_nodes(podset.get("topologyAssignment") or {})
    return None


def placed_within(probe: Callable[[], list[str] | None], started: float,
                  waits: list[float]) -> list[str] | None:
    """PROBE (a gang's nodes once placed), polled every 0.2 s until it answers or
    ADMIT_SECONDS from STARTED have passed; the seconds it took go to WAITS."""
    got = None
    while got is None and time.monotonic() - started < ADMIT_SECONDS:
        time.sleep(0.2)
        got = probe()
    if got is not None:
        waits.append(time.monotonic() - started)
    return got


def kueue_tas(box: cluster.Sandbox, nodes: list[Obj], sizes: list[int]
              ) -> tuple[Outcomes, list[float]]:
    """Each gang submitted as Kueue TAS takes it, the next once it is admitted or
    ADMIT_SECONDS have passed; the outcomes and the seconds each admission took."""
    for obj in peers.tas_objects(QUEUE, GROUP, len(nodes), NAMESPACE):
        box.kubectl("apply", "--server-side", "-f", "-", input_text=json.dumps(obj))
    outcomes: Outcomes = []
    waits: list[float] = []
    for i, workers in enumerate(sizes):
        unit: peers.Unit = "domain" if workers <= GROUP.nodes_per_domain else "block"
        job = peers.tas_gang(f"g{i}", NAMESPACE, QUEUE, GROUP, workers,
                             GROUP.accelerator.per_node, unit, keep_running=True)
        started = time.monotonic()
        box.kubectl("apply", "--server-side", "-f", "-", input_text=json.dumps(job))
        got = placed_within(functools.partial(admitted, box, f"g{i}"), started, waits)
        outcomes.append(got)
    held = sum(len(got) for got in outcomes if got is not None)
    deadline = time.monotonic() + 60
    while (running := len(json.loads(box.kubectl(
            "get", "pods", "-n", NAMESPACE, "-o", "json",
            "--field-selector=status.phase=Running").stdout)["items"])) != held:
        if time.monotonic() > deadline:  # kwok finished them: the room was not held
            raise RuntimeError(f"{running} of the admitted gangs' {held} pods are running: "
                               f"the sandbox's kwok did not keep them")
        time.sleep(1)
    return outcomes, waits


def bound(box: cluster.Sandbox, gang: str) -> list[str] | None:
    """The nodes of GANG's pods, in pod order, once every one is bound; else None."""
    pods = json.loads(box.kubectl("get", "pods", "-n", NAMESPACE, "-l", f"gang={gang}",
                                  "-o", "json").stdout)["items"]
    nodes = [p["spec"].get("nodeName") for p in sorted(
        pods, key=lambda p: int(p["metadata"]["name"].rsplit("-", 1)[1]))]
    return nodes if nodes and all(nodes) else None


def upstream(box: cluster.Sandbox, sizes: list[int]) -> tuple[Outcomes, list[float]]:
    """Each gang submitted as a PodGroup of Kubernetes' own gang scheduling, the next once
    its pods are all bound or ADMIT_SECONDS have passed (then it is deleted: refused);
    the outcomes and the seconds each binding took."""
    outcomes: Outcomes = []
    waits: list[float] = []
    for i, workers in enumerate(sizes):
        unit: peers.Unit = "domain" if workers <= GROUP.nodes_per_domain else "block"
        objects = peers.upstream_gang(f"g{i}", NAMESPACE, GROUP, workers,
                                      GROUP.accelerator.per_node, unit)
        started = time.monotonic()
        box.kubectl("apply", "-f", "-", input_text=json.dumps(
            {"apiVersion": "v1", "kind": "List", "items": objects}))
        got = placed_within(functools.partial(bound, box, f"g{i}"), started, waits)
        outcomes.append(got)
        if got is None:
            box.kubectl("delete", "pods", "-n", NAMESPACE, "-l", f"gang=g{i}",
                        "--grace-period=0", "--force")
            box.kubectl("delete", "podgroup", "-n", NAMESPACE, f"g{i}")
    return outcomes, waits


def in_sandbox(box: cluster.Sandbox, ref: str,
               run: Callable[[cluster.Sandbox], tuple[Outcomes, list[float]]]
               ) -> tuple[Outcomes, list[float]]:
    """RUN on a fresh sandbox BOX of fleet REF, deleted after."""
    if box.is_running():
        cluster.down(box)
    cluster.up(box, ref, wait_seconds=180)
    try:
        box.kubectl("create", "namespace", NAMESPACE)
        return run(box)
    finally:
        cluster.down(box)


def seconds(waits: list[float]) -> Obj:
    ordered = sorted(waits)
    return {"p50": statistics.median(ordered) if ordered else None,
            "p99": ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)] if ordered else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--domains", type=int, default=32)
    parser.add_argument("--gangs", type=int, default=48)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-upstream", action="store_true",
                        help="without Kubernetes' own gang scheduling (alpha)")
    args = parser.parse_args()
    ref = f"synthetic:trn2:{args.domains}"
    chosen = fleets.load(ref)
    nodes = fleets.pool_nodes(chosen, chosen.spec.pools[0])
    sizes = trace(args.gangs, args.seed)
    def with_kueue(box: cluster.Sandbox) -> tuple[Outcomes, list[float]]:
        kueue.start(box)
        try:
            return kueue_tas(box, nodes, sizes)
        finally:
            kueue.stop(box)

    theirs, waits = in_sandbox(cluster.Sandbox("bench-peers"), ref, with_kueue)
    gangs, binds = ([], []) if args.no_upstream else in_sandbox(
        cluster.Sandbox("bench-peers-gang", upstream_gang=True), ref,
        lambda box: upstream(box, sizes))
    mine = ours(nodes, sizes)
    prefix = min(first_refusal(o) for o in (mine, theirs, *([gangs] if gangs else [])))
    results = [summary("goodput (topology.placement)", nodes, sizes, mine, prefix),
               summary(f"Kueue {peers.KUEUE_VERSION} TAS", nodes, sizes, theirs, prefix)]
    if gangs:
        results.append(summary(f"kube-scheduler {versions.KUBERNETES} gang (alpha)", nodes,
                               sizes, gangs, prefix))
    report = {"fleet": ref, "nodes": len(nodes), "gangs": sizes, "seed": args.seed,
              "paired_prefix": prefix, "results": results,
              "kueue_admission_s": seconds(waits),
              "upstream_bound_s": seconds(binds) if gangs else None}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{len(sizes)} gangs ({sum(sizes)} nodes asked) on {ref} ({len(nodes)} nodes), "
          f"seed {args.seed}; paired: the first {prefix} gangs, placed by every system")
    print(f"{'system':38} {'placed':>7} {'nodes':>6} {'before 1st refusal':>19} "
          f"{'above min (paired)':>19} {'whole free (paired)':>20} {'largest (paired)':>17}")
    for row in results:
        paired = row["paired"]
        print(f"{row['system']:38} {row['placed']:>7} {row['nodes_placed']:>6} "
              f"{row['before_first_refusal']:>19} "
              f"{paired['domains_above_minimum']:>19} {paired['whole_free_domains']:>20} "
              f"{paired['largest_gang']:>17}")
    times = report["kueue_admission_s"]
    print(f"Kueue admission after submit: p50 {times['p50']:.2f} s, p99 {times['p99']:.2f} s")
    if report["upstream_bound_s"]:
        times = report["upstream_bound_s"]
        print(f"Upstream gang bound after submit: p50 {times['p50']:.2f} s, "
              f"p99 {times['p99']:.2f} s")

if __name__ == "__main__":
    main()
