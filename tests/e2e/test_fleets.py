"""Every fleet the seeds name, proven on its own simulated nodes with its own examples:
Trn3 Gen1 (4 x 16) and Gen2 (36 x 4) UltraServers, p5e and p5en (H200), p6-b200, p6-b300,
GB300 NVL72, Azure ND H100 v5 on InfiniBand, a RoCE cluster and TPU v5p slices. For each:
the fleet file's pool as KWOK nodes labelled as the provider (or topograph) labels them,
the example group over them, the example TrainingJob placed in one domain (a multislice
TPU job: a whole slice for each of its slices) with its ranks in fabric order and its
fabric's settings, a failed node's rank taken by a spare of the same domain (on TPU: the
gang moved to whole slices without the broken one), and the example InferenceEndpoint's
multi-node replicas each inside one domain."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from goodput_operator import names
from goodput_operator.api.ultraservergroup import UltraServerGroupSpec
from goodput_operator.resources.fabric import EFA_RESOURCE
from goodput_operator.sandbox import fleet as fleets
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    NO_SWEEPS,
    Operator,
    apply,
    delete_all,
    get_object,
    job_pods,
    own_nodes,
    sandbox_cli,
    wait_phase,
)
from tests.e2e.test_inference import pods_of, wait_status
from tests.e2e.test_recovery import env_of, ranked_nodes, running_again
from tests.unit.fleets import slice_size

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@dataclass(frozen=True)
class Case:
    """One pool of a fleet file, and the examples written for it (examples/FLEET/*-SUFFIX)."""

    fleet: str
    pool: str
    suffix: str

    def example(self, kind: str) -> dict[str, Any]:
        doc: dict[str, Any] = yaml.safe_load(
            (EXAMPLES / self.fleet / f"{kind}-{self.suffix}.yaml").read_text())
        return doc


CASES = [Case("trn3", "trn3-gen1", "gen1"), Case("trn3", "trn3-gen2", "gen2"),
         Case("p5e", "p5e", "p5e"), Case("p5e", "p5en", "p5en"), Case("p6", "b200", "b200"),
         Case("b300", "b300", "b300"), Case("b300", "gb300", "gb300"),
         Case("ndv5", "ndv5", "ndv5"), Case("roce", "roce-h100", "roce"),
         Case("tpu", "v5p", "tpu")]


@dataclass
class Pool:
    """A case's nodes and group, and the nodes the test failed."""

    case: Case
    group: dict[str, Any]
    failed: list[str]


@pytest.fixture(params=CASES, ids=lambda c: c.pool)
def pool(request: pytest.FixtureRequest, crds: Cluster, namespace: str) -> Iterator[Pool]:
    """The case's nodes and its example group (probes off the clock, NO_SWEEPS). The failed
    nodes are healed first (a pod on a NotReady node is never confirmed gone), then the
    test's jobs and endpoints are deleted, then the group and the nodes."""
    case: Case = request.param
    group = case.example("ultraservergroup")
    group["spec"]["probes"] = NO_SWEEPS
    with own_nodes(crds, fleets.load(case.fleet), case.pool):
        apply(crds, group)
        made = Pool(case, group, [])
        try:
            yield made
        finally:
            if made.failed:
                sandbox_cli(crds, "heal-node", *made.failed)
            delete_all(crds, "tj,ie", namespace)  # both, then their pods gone
            crds.kubectl("delete", "usg", group["metadata"]["name"], "--ignore-not-found")


def node_labels(crds: Cluster) -> dict[str, dict[str, str]]:
    return {n["metadata"]["name"]: n["metadata"]["labels"] for n in json.loads(
        crds.kubectl("get", "nodes", "-o", "json").stdout)["items"]}


def slots_written(crds: Cluster, nodes: list[str]) -> dict[str, dict[str, str]]:
    """Every node's labels, once the group's slot labels are on NODES: they are written in
    the background (LABEL_CONCURRENCY at a time), so a gang may be placed on a large
    pool, by the group's own fabric order, before all of its members carry them."""
    def written() -> dict[str, dict[str, str]] | None:
        labels = node_labels(crds)
        return labels if all(names.SLOT_LABEL in labels[n] for n in nodes) else None
    return wait_for(written, timeout=60, what=f"{names.SLOT_LABEL} on {nodes}")


def test_each_fleets_examples_place_recover_and_serve_inside_one_domain(
        e2e: Operator, crds: Cluster, namespace: str, pool: Pool) -> None:
    case, group = pool.case, pool.group
    spec = UltraServerGroupSpec.model_validate(group["spec"])
    domain_key, per_node = spec.domain_key, spec.accelerator.per_node
    example = case.example("trainingjob")
    name, workers = example["metadata"]["name"], example["spec"]["workers"]
    per_worker = example["spec"]["acceleratorsPerWorker"]
    # a gang of slices (TPU multislice) takes a domain per slice; any other, one domain
    size = slice_size(example["spec"])
    assert per_worker == per_node  # the examples take whole nodes
    apply(crds, example, namespace)
    job = wait_phase(crds, namespace, name, "Running")

    # whole domains, ranks in fabric order: the slots the operator labels follow the ranks
    nodes = ranked_nodes(job)
    labels = slots_written(crds, nodes)
    slices = [nodes[i:i + size] for i in range(0, workers, size)]
    assert len(job["status"]["placement"]["domains"]) == len(slices) and len(nodes) == workers
    assert {labels[n][domain_key] for n in nodes} == set(job["status"]["placement"]["domains"])
    for part in slices:
        assert len({labels[n][domain_key] for n in part}) == 1
        slots = [int(labels[n][names.SLOT_LABEL]) for n in part]
        assert slots == sorted(slots) and len(set(slots)) == size, slots
    pods = job_pods(crds, namespace, name)
    assert [p["spec"]["nodeName"] for p in pods] == nodes
    for rank, pod in enumerate(pods):
        requests = pod["spec"]["containers"][0]["resources"]["requests"]
        assert requests[spec.accelerator.resource] == str(per_worker)
        fabric_settings(spec, requests, env_of(pod), rank, workers, size)
    if spec.interconnect == "nvlink":  # the gang shares GPU memory across its nodes
        get_object(crds, "computedomain", namespace, f"{name}-imex")

    # a failed node: a spare of the same domain takes its rank, the others stay; a TPU
    # slice has no spare host, so its gang moves to whole slices without the broken one
    victim = nodes[1]
    pool.failed.append(victim)
    sandbox_cli(crds, "fail-node", victim)
    job = running_again(crds, namespace, name, 1, timeout=90)
    moved = ranked_nodes(job)
    if spec.interconnect == "ici":
        domains = [{labels[n][domain_key] for n in moved[i:i + size]}
                   for i in range(0, workers, size)]
        assert all(len(d) == 1 for d in domains) and len(set.union(*domains)) == len(slices)
        assert labels[victim][domain_key] not in set.union(*domains)
    else:
        assert moved[:1] + moved[2:] == nodes[:1] + nodes[2:] and moved[1] != victim
        assert labels[moved[1]][domain_key] == labels[victim][domain_key]

    # the example endpoint: each multi-node replica inside one domain
    endpoint = case.example("inferenceendpoint")
    served, replicas = endpoint["metadata"]["name"], endpoint["spec"]["replicas"]
    replica_size = endpoint["spec"]["replicaShape"]["workers"]
    apply(crds, endpoint, namespace)
    status = wait_status(crds, namespace, served, f"{replicas} replicas ready",
                         readyReplicas=replicas)
    assert len(status["groups"]) == replicas
    for replica in status["groups"]:
        assert len(replica["nodes"]) == replica_size > 1
        assert {labels[n][domain_key] for n in replica["nodes"]} == {replica["domain"]}
        assert not set(replica["nodes"]) & set(moved)  # beside the job, not on it
    assert len(pods_of(crds, namespace, served)) == replicas * replica_size


def fabric_settings(spec: UltraServerGroupSpec, requests: dict[str, str], env: dict[str, str],
                    rank: int, workers: int, size: int) -> None:
    """A worker's launcher variables and its fabric's devices and settings, by fabric."""
    if spec.interconnect == "ici":  # JAX: its slice's hosts; the Megascale join over slices
        assert env["TPU_WORKER_ID"] == str(rank % size)
        assert len(env["TPU_WORKER_HOSTNAMES"].split(",")) == size
        assert env.get("MEGASCALE_SLICE_ID") == (str(rank // size) if workers > size
                                                 else None)
        assert EFA_RESOURCE not in requests and "NCCL_SOCKET_IFNAME" not in env
        return
    assert (env["NODE_RANK"], env["NNODES"]) == (str(rank), str(workers))
    if spec.accelerator.rdma_resource:  # InfiniBand, RoCE: the HCAs, NCCL on IB verbs
        assert requests[spec.accelerator.rdma_resource] == "1"
        assert env["NCCL_NET"] == "IB" and EFA_RESOURCE not in requests
    else:
        assert requests[EFA_RESOURCE] == str(spec.accelerator.efa_per_node)  # whole nodes
        assert env["FI_PROVIDER"] == "efa"
    if spec.accelerator.resource == "nvidia.com/gpu":
        assert env["NCCL_SOCKET_IFNAME"] == "^lo,docker"
    else:
        assert env["NEURON_RT_ROOT_COMM_ID"].endswith(":29501")
