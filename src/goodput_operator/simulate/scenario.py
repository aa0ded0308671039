"""A scenario: a simulated fleet with its UltraServerGroup, a workload of TrainingJobs and a
failure model, run under several policies on the same failures."""

from __future__ import annotations

import time
import tracemalloc
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.api.ultraservergroup import UltraServerGroupSpec
from goodput_operator.sandbox import fleet as simulated
from goodput_operator.simulate.engine import Job, Result, Simulation
from goodput_operator.simulate.failures import DAY, Failure, FailureModel, draw, read_trace
from goodput_operator.simulate.policies import Costs, policies

Obj = dict[str, Any]
GROUP = "simulated"
POLICIES = ("ours", "kubernetes", "kueue", "hyperpod")


@dataclass(frozen=True)
class PlannedFleet:
    """The fleet a plan is for: its nodes and the UltraServerGroup over them (a spec, not
    the placement model's topology.model.Fleet, which the simulation builds from it)."""

    name: str
    group: UltraServerGroupSpec
    nodes: list[Obj]

    @property
    def per_node(self) -> int:
        return self.group.accelerator.per_node

    @property
    def accelerators(self) -> int:
        return len(self.nodes) * self.per_node

    @property
    def spare_nodes(self) -> int:
        domains = len(self.nodes) // self.group.nodes_per_domain
        return domains * self.group.spares.per_domain + self.group.spares.per_group

    def with_quarantine(self, **fields: Any) -> PlannedFleet:
        """The group with quarantine settings changed (e.g. lease_silence_seconds=5)."""
        quarantine = self.group.quarantine.model_copy(update=fields)
        return replace(self, group=self.group.model_copy(update={"quarantine": quarantine}))

    def with_spares(self, per_domain: int, per_group: int) -> PlannedFleet:
        spares = self.group.spares.model_copy(update={"per_domain": per_domain,
                                                      "per_group": per_group})
        return replace(self, group=self.group.model_copy(update={"spares": spares}))


def load_fleet(ref: str, spares_per_domain: int = 0, spares_per_group: int = 0) -> PlannedFleet:
    """A fleet by name, file or `synthetic:KIND:N` (its first pool), with the group the
    examples give such a fleet: its domain label, network levels and accelerators."""
    loaded = simulated.load(ref)
    pool = loaded.spec.pools[0]
    resource = next(k for k in pool.capacity if "/" in k and "efa" not in k)
    nodes = simulated.pool_nodes(loaded, pool)
    for node in nodes:
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    group = UltraServerGroupSpec.model_validate({
        "nodeSelector": {simulated.POOL_LABEL: pool.name},
        "domainLabel": pool.domain_label or simulated.NETWORK_LAYER_LABELS[2],
        "networkLevels": list(simulated.NETWORK_LAYER_LABELS[:2]),
        "accelerator": {"resource": resource, "perNode": int(pool.capacity[resource])},
        "nodesPerDomain": pool.nodes_per_domain,
        "spares": {"perDomain": spares_per_domain, "perGroup": spares_per_group},
    })
    return PlannedFleet(loaded.name, group, nodes)


def job_spec(workers: int, per_node: int, document: Obj | None = None) -> TrainingJobSpec:
    """A whole-node gang of WORKERS: the spec of a TrainingJob file (DOCUMENT) at that
    size, else one that restarts as often as failures need (budgets at their maximum),
    verifies its checkpoints by the replicas' votes, and prefers few domains without
    requiring them (a gang of thousands spans many)."""
    spec = (document or {}).get("spec") or {
        "workers": 1, "acceleratorsPerWorker": per_node,
        "template": {"spec": {"containers": [{"name": "trainer", "image": "trainer"}]}},
        "topology": {"unit": "domain", "policy": "preferred"},
        "failurePolicy": {"maxRestarts": 10_000, "maxInfrastructureRestarts": 10_000},
        "checkpoint": {"verify": True}, "sdc": {"crossReplicaCheck": True}}
    parsed = TrainingJobSpec.model_validate({**spec, "ultraServerGroup": GROUP})
    if parsed.accelerators_per_worker != per_node:
        raise ValueError(f"the job's acceleratorsPerWorker {parsed.accelerators_per_worker} "
                         f"is not a whole node ({per_node}): the simulator runs whole-node "
                         "gangs")
    # past the API's 8192 workers a job is allowed here, to ask what a Rainier-sized gang
    # would see (the operator itself refuses such an object)
    return parsed.model_copy(update={"workers": workers})


def read_job(path: Path) -> Obj:
    document = yaml.safe_load(path.read_text())
    if not isinstance(document, dict) or document.get("kind") != "TrainingJob":
        raise ValueError(f"{path}: not a TrainingJob")
    return document


@dataclass
class Scenario:
    fleet: PlannedFleet
    days: float = 54.0
    jobs: list[int] = field(default_factory=list)  # worker counts; empty: one giant job
    job_hours: float | None = None  # each job's training; None: runs to the end
    job_document: Obj | None = None
    model: FailureModel = field(default_factory=FailureModel)
    costs: Costs = field(default_factory=Costs)
    seed: int = 1
    trace: Path | None = None

    @property
    def horizon(self) -> float:
        return self.days * DAY

    def workers(self) -> list[int]:
        """The jobs' sizes: as given, else the job file's, else one gang on every node
        not held as a spare."""
        if self.jobs:
            return self.jobs
        if self.job_document is not None:
            return [int((self.job_document.get("spec") or {}).get("workers") or 1)]
        return [len(self.fleet.nodes) - self.fleet.spare_nodes]

    def failures(self) -> list[Failure]:
        names = [n["metadata"]["name"] for n in self.fleet.nodes]
        if self.trace is not None:
            return read_trace(self.trace, names, self.model)
        # from one repair time before the start: the fleet begins as it would stand in
        # the middle of a long run, with the nodes failed in the last days still out
        return draw(self.model, names, self.fleet.per_node, self.horizon, self.seed,
                    start=-self.model.longest_repair)

    def make_jobs(self) -> list[Job]:
        found = []
        for index, workers in enumerate(self.workers()):
            spec = job_spec(workers, self.fleet.per_node, self.job_document)
            target = float("inf") if self.job_hours is None else \
                self.job_hours * 3600.0 * spec.workers * spec.accelerators_per_worker
            found.append(Job(f"job{index}", spec, target))
        return found


@dataclass(frozen=True)
class Run:
    result: Result
    seconds: float  # wall time of the run
    peak_mib: float  # traced Python memory at its peak


def run(scenario: Scenario, names: tuple[str, ...] = POLICIES,
        failures: list[Failure] | None = None, measure_memory: bool = False
        ) -> dict[str, Run]:
    """Every policy in NAMES on the same fleet, workload and failures."""
    failures = scenario.failures() if failures is None else failures
    known = policies(scenario.costs)
    runs = {}
    for name in names:
        if measure_memory:
            tracemalloc.start()
        started = time.perf_counter()
        simulation = Simulation(known[name], scenario.costs, scenario.fleet.group,
                                scenario.fleet.nodes, scenario.make_jobs(), failures,
                                scenario.model, scenario.horizon, scenario.seed,
                                resubmit=scenario.job_hours is not None)
        result = simulation.run()
        peak = 0.0
        if measure_memory:
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
        runs[name] = Run(result, time.perf_counter() - started, peak)
    return runs
