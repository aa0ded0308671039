"""Placement, head to head with Kueue's Topology Aware Scheduling and Kubernetes' own gang
scheduling (issue 46): the same gangs, in the same order, on the same KWOK fleet.

    python -m bench.peers_placement [--json] [--kind trn2|nvl72] [--domains D] [--gangs G]
                                    [--seed N] [--no-upstream] [--no-operator]

The fleet: `synthetic:trn2:D` (default 32 UltraServers of 4 nodes x 16 chips, 128 nodes,
in network blocks of 16), or with `--kind nvl72` `synthetic:nvl72:D` (default 16 GB200
racks of 18 nodes x 4 GPUs, 288 nodes). The trace: G gangs (default 48) of whole-node
workers (trn2: 1 to 16 nodes; nvl72: 1 to 36), seeded, submitted one after another and
never finished: about twice what the fleet holds, so that every system must refuse some.

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
- **Ours**, asked the same (unit domain or block, policy required; inside the block it
  still takes the fewest UltraServers, then least fragmentation), twice: the placement
  engine (topology.placement.place, what decide.job runs) on a model of the same node
  objects, and the operator itself in a sandbox of its own, each gang a TrainingJob,
  placed when all its workers are bound within ADMIT_SECONDS (else deleted: refused).
  The report says whether the operator placed every gang where the engine did.

Reported per system: gangs placed and their nodes, gangs placed before the first
refusal, gangs refused while as many nodes as they ask were free (refused for packing,
not for want of nodes), and, over the first gangs every system placed before any refused
one (the same gangs on every fleet, so the end states differ by packing alone), domains
spanned
above the minimum, whole free domains left, and the largest gang of whole nodes that
still fits in the fewest domains (bench.placement's yardsticks); the same over the
whole trace in the JSON. Seconds from a gang's submit to its admission (Kueue) or to its
last pod bound (upstream, the operator), p50 and p99. Each controller's CPU seconds over
the trace and its peak resident memory (/proc): the operator, Kueue's manager, and the
kube-scheduler of each sandbox (it binds Kueue's pods and upstream's gangs; the operator's
workers are bound by it too).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import cpu_seconds, process_of, rss_mb, wait_until
from bench.placement import largest_gang, whole_free_domains
from goodput_operator import names
from goodput_operator.api.ultraservergroup import UltraServerGroupSpec
from goodput_operator.sandbox import build, cluster, kueue, peers, versions
from goodput_operator.sandbox import fleet as fleets
from goodput_operator.topology.model import Fleet, GroupShape
from goodput_operator.topology.placement import Request, Unit, commit, place

Obj = dict[str, Any]
NAMESPACE, QUEUE = "bench", "gangs"
# the fleet's blocks are its layer-2 switches; layer 3 is the domain's own
L1, L2 = "topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2"


@dataclass(frozen=True)
class Kind:
    """A fleet kind the trace runs on: its group (whole-node workers) and gang sizes."""

    name: str
    spec: Obj  # the UltraServerGroup's spec
    sizes: tuple[int, ...]  # nodes per gang, drawn at random
    domains: int  # the default fleet's domains

    @property
    def group(self) -> UltraServerGroupSpec:
        return UltraServerGroupSpec.model_validate(self.spec)

    def unit(self, workers: int) -> Unit:
        """What every system is asked: one domain when the gang fits in one, else one
        network block."""
        return "domain" if workers <= self.group.nodes_per_domain else "block"


TRN2 = Kind("trn2", {
    "nodeSelector": {"node.kubernetes.io/instance-type": "trn2u.48xlarge"},
    "domainLabel": "topology.k8s.aws/ultraserver-id", "networkLevels": [L1, L2],
    "accelerator": {"resource": "aws.amazon.com/neuron", "perNode": 16},
    "nodesPerDomain": 4}, (1, 1, 2, 2, 3, 4, 4, 4, 6, 8, 8, 12, 16), 32)
NVL72 = Kind("nvl72", {
    "nodeSelector": {"node.kubernetes.io/instance-type": "p6e-gb200.36xlarge"},
    "domainLabel": "nvidia.com/gpu.clique", "networkLevels": [L1, L2],
    "accelerator": {"resource": "nvidia.com/gpu", "perNode": 4},
    "nodesPerDomain": 18}, (1, 1, 2, 2, 4, 4, 8, 8, 9, 12, 16, 18, 18, 27, 36), 16)
KINDS = {kind.name: kind for kind in (TRN2, NVL72)}
GROUP = TRN2.group
ADMIT_SECONDS = 8.0  # a gang Kueue has not admitted by then counts as refused (its
# admissions here took under a second; nothing frees room later: no gang finishes)


def trace(gangs: int, seed: int, kind: Kind = TRN2) -> list[int]:
    rng = random.Random(seed)
    return [rng.choice(kind.sizes) for _ in range(gangs)]


def model(nodes: list[Obj], group: UltraServerGroupSpec = GROUP) -> Fleet:
    """The fleet as the operator models it, its nodes Ready (as kwok makes them)."""
    ready = [{**n, "status": {**(n.get("status") or {}), "conditions": [
        {"type": "Ready", "status": "True"}]}} for n in nodes]
    return Fleet.from_objects(GroupShape.from_spec(group), ready)


def end_state(nodes: list[Obj], placed: list[tuple[int, list[str]]],
              group: UltraServerGroupSpec = GROUP) -> Obj:
    """The yardsticks, from the gangs placed (workers, nodes) on a model of the fleet."""
    fleet = model(nodes, group)
    above = 0
    for i, (workers, on) in enumerate(placed):
        for rank, node in enumerate(on):
            fleet.bind(f"bench/g{i}#{rank}", node, group.accelerator.per_node, f"bench/g{i}")
        spanned = len({fleet.nodes[n].domain for n in on})
        above += spanned - math.ceil(workers / group.nodes_per_domain)
    return {"domains_above_minimum": above, "whole_free_domains": whole_free_domains(fleet),
            "largest_gang": largest_gang(fleet)}


Outcomes = list[list[str] | None]  # per gang, in order: the nodes it got, or None (refused)


def first_refusal(outcomes: Outcomes) -> int:
    return next((i for i, got in enumerate(outcomes) if got is None), len(outcomes))


def refused_with_room(nodes: int, sizes: list[int], outcomes: Outcomes) -> list[int]:
    """The gangs refused while at least as many whole nodes as they ask were free: refused
    for where the earlier gangs were put, not for want of nodes. (A system that refuses
    one such gang early places more small gangs later in a trace that fills the fleet:
    the count of gangs placed alone does not tell packing apart.)"""
    free, refused = nodes, []
    for i, (workers, got) in enumerate(zip(sizes, outcomes, strict=True)):
        if got is not None:
            free -= workers
        elif workers <= free:
            refused.append(i)
    return refused


def summary(system: str, nodes: list[Obj], sizes: list[int], outcomes: Outcomes,
            prefix: int, group: UltraServerGroupSpec = GROUP) -> Obj:
    """SYSTEM's figures: over the whole trace, and over its first PREFIX gangs (those
    both systems placed before either refused one: the same gangs on both fleets, so
    their end states differ by packing alone)."""
    placed = [(w, got) for w, got in zip(sizes, outcomes, strict=True) if got is not None]
    return {"system": system, "placed": len(placed),
            "nodes_placed": sum(w for w, _ in placed),
            "refused": [i for i, got in enumerate(outcomes) if got is None],
            "before_first_refusal": first_refusal(outcomes),
            "refused_with_room": refused_with_room(len(nodes), sizes, outcomes),
            "end": end_state(nodes, placed, group),
            "paired": end_state(nodes, placed[:prefix], group)}


def ours(nodes: list[Obj], sizes: list[int], kind: Kind = TRN2) -> Outcomes:
    group = kind.group
    fleet = model(nodes, group)
    outcomes: Outcomes = []
    for i, workers in enumerate(sizes):
        request = Request(workers, group.accelerator.per_node, kind.unit(workers), "required")
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


def replay(sizes: list[int], submit: Callable[[str, int], object],
           placed: Callable[[str, int], list[str] | None],
           refuse: Callable[[str], object] | None = None) -> tuple[Outcomes, list[float]]:
    """Each gang of SIZES submitted as a system takes it (SUBMIT(name, workers)), the next
    once PLACED(name, workers) answers its nodes, polled every 0.2 s, or ADMIT_SECONDS
    have passed (then REFUSE(name), where given); the outcomes and the seconds each
    placement took."""
    outcomes: Outcomes = []
    waits: list[float] = []
    for i, workers in enumerate(sizes):
        name = f"g{i}"
        started = time.monotonic()
        submit(name, workers)
        got = None
        while got is None and time.monotonic() - started < ADMIT_SECONDS:
            time.sleep(0.2)
            got = placed(name, workers)
        if got is not None:
            waits.append(time.monotonic() - started)
        elif refuse is not None:
            refuse(name)
        outcomes.append(got)
    return outcomes, waits


def bound(box: cluster.Sandbox, selector: str, workers: int, rank: Callable[[Obj], int]
          ) -> list[str] | None:
    """The nodes of the pods SELECTOR finds, in RANK order, once all WORKERS are bound."""
    pods = json.loads(box.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector,
                                  "-o", "json").stdout)["items"]
    nodes = [p["spec"].get("nodeName") for p in sorted(pods, key=rank)]
    return nodes if len(nodes) == workers and all(nodes) else None


def kueue_tas(box: cluster.Sandbox, nodes: list[Obj], sizes: list[int], kind: Kind = TRN2
              ) -> tuple[Outcomes, list[float]]:
    """Each gang submitted as Kueue TAS takes it, the next once it is admitted or
    ADMIT_SECONDS have passed; the outcomes and the seconds each admission took."""
    group = kind.group
    box.apply(*peers.tas_objects(QUEUE, group, len(nodes), NAMESPACE))
    outcomes, waits = replay(
        sizes, lambda name, workers: box.apply(peers.tas_gang(
            name, NAMESPACE, QUEUE, group, workers, group.accelerator.per_node,
            kind.unit(workers), keep_running=True)),
        lambda name, _: admitted(box, name))
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


def upstream(box: cluster.Sandbox, sizes: list[int], kind: Kind = TRN2
             ) -> tuple[Outcomes, list[float]]:
    """Each gang submitted as a PodGroup of Kubernetes' own gang scheduling, the next once
    its pods are all bound or ADMIT_SECONDS have passed (then it is deleted: refused);
    the outcomes and the seconds each binding took."""
    def refuse(name: str) -> None:
        box.kubectl("delete", "pods", "-n", NAMESPACE, "-l", f"gang={name}",
                    "--grace-period=0", "--force")
        box.kubectl("delete", "podgroup", "-n", NAMESPACE, name)

    return replay(
        sizes, lambda name, workers: box.apply(*peers.upstream_gang(
            name, NAMESPACE, kind.group, workers, kind.group.accelerator.per_node,
            kind.unit(workers))),
        lambda name, workers: bound(box, f"gang={name}", workers, pod_index), refuse)


def pod_index(pod: Obj) -> int:
    """An upstream gang's pod's index: its name's last part (`g3-0`, `g3-1`, ...)."""
    return int(pod["metadata"]["name"].rsplit("-", 1)[1])


def worker_rank(pod: Obj) -> int:
    return int(pod["metadata"]["labels"][names.RANK_LABEL])


def training_job(name: str, workers: int, kind: Kind = TRN2) -> Obj:
    """A gang as a TrainingJob, asked what the peers are asked: inside one domain when it
    fits in one, else inside one network block (where ours still takes the fewest domains
    it can)."""
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"ultraServerGroup": OPERATOR_GROUP, "workers": workers,
                     "acceleratorsPerWorker": kind.group.accelerator.per_node,
                     "topology": {"unit": kind.unit(workers), "policy": "required"},
                     "template": {"spec": {"containers": [
                         {"name": "worker", "image": "example.com/train:1"}]}}}}


def operator(box: cluster.Sandbox, sizes: list[int], kind: Kind
             ) -> tuple[Outcomes, list[float]]:
    """Each gang submitted as a TrainingJob to the operator, the next once its workers are
    all bound or ADMIT_SECONDS have passed (then it is deleted: refused, as upstream's)."""
    return replay(
        sizes, lambda name, workers: box.apply(training_job(name, workers, kind)),
        lambda name, workers: bound(box, f"{names.JOB_LABEL}={name}", workers, worker_rank),
        lambda name: box.kubectl("delete", "trainingjob", "-n", NAMESPACE, name,
                                 "--wait=true"))


OPERATOR_GROUP = "bench-peers"


def usage(pid: int | None, cpu_before: float) -> Obj:
    """A controller's CPU seconds since CPU_BEFORE and its peak resident memory."""
    if pid is None:
        return {"cpu_s": None, "peak_rss_mib": None}
    return {"cpu_s": round(cpu_seconds(pid) - cpu_before, 2),
            "peak_rss_mib": round(rss_mb(pid)[1], 1)}


def measured(pids: dict[str, int | None], run: Callable[[], tuple[Outcomes, list[float]]]
             ) -> tuple[Outcomes, list[float], Obj]:
    """RUN's outcomes and waits, with the CPU and memory of each controller in PIDS (by
    name) over RUN."""
    before = {name: cpu_seconds(pid) if pid else 0.0 for name, pid in pids.items()}
    outcomes, waits = run()
    return outcomes, waits, {name: usage(pid, before[name]) for name, pid in pids.items()}


def scheduler_pid(box: cluster.Sandbox) -> int | None:
    return process_of(str(build.cache_root() / "kwok" / "clusters" / box.name / "bin" /
                          "kube-scheduler"))


Run = tuple[Outcomes, list[float], Obj]  # outcomes, seconds to placed, controller usage


def in_sandbox(box: cluster.Sandbox, ref: str, run: Callable[[cluster.Sandbox], Run]) -> Run:
    """RUN on a fresh sandbox BOX of fleet REF, deleted after."""
    if box.is_running():
        cluster.down(box)
    cluster.up(box, ref, wait_seconds=180)
    try:
        box.kubectl("create", "namespace", NAMESPACE)
        return run(box)
    finally:
        cluster.down(box)


def with_operator(ref: str, sizes: list[int], kind: Kind) -> Run:
    """The trace as TrainingJobs, through the operator in a sandbox of its own."""
    group = {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
             "metadata": {"name": OPERATOR_GROUP},
             "spec": {**kind.spec, "probes": {"schedule": ""}}}  # no probe takes a node
    with harness.sandbox("bench-peers-operator", ref, group, namespaces=[NAMESPACE],
                         wait_seconds=180) as box:
        process = harness.OperatorProcess(box, Path(box.home) / "operator.log")
        process.start()
        try:
            wait_until(process.ready, 120, "operator ready")
            assert process.proc is not None
            pid = process.proc.pid
            return measured({"goodput operator": pid, "kube-scheduler": scheduler_pid(box)},
                            lambda: operator(box, sizes, kind))
        finally:
            process.stop()


def seconds(waits: list[float]) -> Obj:
    ordered = sorted(waits)
    return {"p50": statistics.median(ordered) if ordered else None,
            "p99": ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)] if ordered else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--kind", choices=sorted(KINDS), default="trn2",
                        help="trn2: UltraServers of 4 nodes x 16 chips; nvl72: GB200 racks "
                             "of 18 nodes x 4 GPUs")
    parser.add_argument("--domains", type=int, default=None,
                        help="domains in the fleet (trn2: 32, nvl72: 16)")
    parser.add_argument("--gangs", type=int, default=48)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-upstream", action="store_true",
                        help="without Kubernetes' own gang scheduling (alpha)")
    parser.add_argument("--no-operator", action="store_true",
                        help="ours as the placement engine only, not also as TrainingJobs "
                             "through the operator")
    args = parser.parse_args()
    kind = KINDS[args.kind]
    group = kind.group
    ref = f"synthetic:{kind.name}:{args.domains or kind.domains}"
    chosen = fleets.load(ref)
    nodes = fleets.pool_nodes(chosen, chosen.spec.pools[0])
    sizes = trace(args.gangs, args.seed, kind)

    def with_kueue(box: cluster.Sandbox) -> Run:
        kueue.start(box)
        try:
            return measured({"kueue": int(kueue.pidfile(box).read_text()),
                             "kube-scheduler": scheduler_pid(box)},
                            lambda: kueue_tas(box, nodes, sizes, kind))
        finally:
            kueue.stop(box)

    theirs, waits, kueue_usage = in_sandbox(cluster.Sandbox("bench-peers"), ref, with_kueue)
    gangs, binds, gang_usage = ([], [], {}) if args.no_upstream else in_sandbox(
        cluster.Sandbox("bench-peers-gang", upstream_gang=True), ref,
        lambda box: measured({"kube-scheduler": scheduler_pid(box)},
                             lambda: upstream(box, sizes, kind)))
    jobs, bound, operator_usage = ([], [], {}) if args.no_operator else \
        with_operator(ref, sizes, kind)
    mine = ours(nodes, sizes, kind)
    prefix = min(first_refusal(o) for o in (mine, theirs, *([gangs] if gangs else []),
                                            *([jobs] if jobs else [])))
    systems = [("goodput (topology.placement)", mine),
               ("goodput operator (TrainingJobs)", jobs),
               (f"Kueue {peers.KUEUE_VERSION} TAS", theirs),
               (f"kube-scheduler {versions.KUBERNETES} gang (alpha)", gangs)]
    results = [summary(system, nodes, sizes, outcomes, prefix, group)
               for system, outcomes in systems if outcomes]
    report = {"fleet": ref, "nodes": len(nodes), "gangs": sizes, "seed": args.seed,
              "paired_prefix": prefix, "results": results,
              "operator_as_engine": jobs == mine if jobs else None,
              "seconds_to_placed": {
                  "operator_all_bound": seconds(bound) if jobs else None,
                  "kueue_admitted": seconds(waits),
                  "upstream_all_bound": seconds(binds) if gangs else None},
              "controllers": {"goodput operator (TrainingJobs)": operator_usage,
                              "Kueue TAS": kueue_usage, "upstream gang": gang_usage}}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{len(sizes)} gangs ({sum(sizes)} nodes asked) on {ref} ({len(nodes)} nodes), "
          f"seed {args.seed}; paired: the first {prefix} gangs, placed by every system")
    print(f"{'system':38} {'placed':>7} {'nodes':>6} {'before 1st refusal':>19} "
          f"{'refused with room':>18} "
          f"{'above min (paired)':>19} {'whole free (paired)':>20} {'largest (paired)':>17}")
    for row in results:
        paired = row["paired"]
        print(f"{row['system']:38} {row['placed']:>7} {row['nodes_placed']:>6} "
              f"{row['before_first_refusal']:>19} {len(row['refused_with_room']):>18} "
              f"{paired['domains_above_minimum']:>19} {paired['whole_free_domains']:>20} "
              f"{paired['largest_gang']:>17}")
    for what, times in report["seconds_to_placed"].items():
        if times and times["p50"] is not None:
            print(f"seconds from submit to {what.replace('_', ' ')}: p50 {times['p50']:.2f}, "
                  f"p99 {times['p99']:.2f}")
    for system, processes in report["controllers"].items():
        for process, used in processes.items():
            print(f"{system}, {process}: {used['cpu_s']} CPU s over the trace, peak RSS "
                  f"{used['peak_rss_mib']} MiB")
    if jobs:
        print(f"the operator placed every gang where the engine did: "
              f"{report['operator_as_engine']}")


if __name__ == "__main__":
    main()
