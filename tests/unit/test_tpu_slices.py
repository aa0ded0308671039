"""TPU slices (interconnect ici): a slice runs whole, so a gang is whole slices of one worker
per host holding all its chips; a failed host moves its gang to whole slices elsewhere (the
spare slice); JAX gets its slice's hosts and, over several slices, the Megascale
variables."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.resources import trainingjob as build
from goodput_operator.resources.fabric import Fabric
from goodput_operator.topology.model import Fleet, GroupShape
from goodput_operator.topology.placement import Request, commit, place
from goodput_operator.topology.replacement import replace
from tests.unit.test_trainingjob_builders import env_of
from tests.unit.test_trainingjob_builders import job as training_job

pytestmark = pytest.mark.unit
NODEPOOL = "cloud.google.com/gke-nodepool"


def host(name: str, pool: str, ready: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {NODEPOOL: pool}}, "spec": {},
            "status": {"allocatable": {"google.com/tpu": "4"},
                       "conditions": [{"type": "Ready", "status": str(ready)}]}}


def v5p(slices: int = 4, spare_slices: int = 0) -> Fleet:
    """SLICES TPU v5p slices of 4 hosts x 4 chips, node pools v5p-0.."""
    shape = GroupShape(NODEPOOL, 4, 4, accelerator_resource="google.com/tpu",
                       spares_per_group=4 * spare_slices, domain_noun="TPU slice",
                       whole_domains=True)
    return Fleet.from_objects(shape, [host(f"v5p-{s}-{h}", f"v5p-{s}")
                                      for s in range(slices) for h in range(4)])


@pytest.mark.parametrize(("workers", "chips", "slice_size", "domains"), [
    (4, 4, 1, 1),      # one slice
    (8, 4, 4, 2),      # multislice: 2 slices, ranks 0-3 and 4-7
    (12, 4, 4, 3),
])
def test_a_gang_takes_whole_slices_ranks_slice_by_slice(
        workers: int, chips: int, slice_size: int, domains: int) -> None:
    placed = place(v5p(), Request(workers, chips, slice=slice_size))
    assert placed.ok, placed.reason
    by_rank = [r.domain for r in sorted(placed.ranks, key=lambda r: r.rank)]
    assert len(set(by_rank)) == domains
    assert all(len(set(by_rank[i:i + 4])) == 1 for i in range(0, workers, 4))


@pytest.mark.parametrize(("workers", "chips", "slice_size"), [
    (8, 4, 1),         # two slices' worth without topology.slice: JAX would see one slice
    (3, 4, 1),         # part of a slice: its hosts start together or not at all
    (4, 2, 1),         # part of a host's chips
    (8, 4, 2),         # slices of half a TPU slice
])
def test_anything_but_whole_slices_is_refused_saying_what_a_slice_needs(
        workers: int, chips: int, slice_size: int) -> None:
    placed = place(v5p(), Request(workers, chips, slice=slice_size))
    assert not placed.ok
    assert "a TPU slice runs whole: 4 workers of 4 google.com/tpu each" in placed.reason
    assert "topology.slice.size 4" in placed.reason


def test_a_failed_host_moves_its_gang_to_whole_slices_never_onto_its_broken_slice() -> None:
    fleet = v5p(slices=4, spare_slices=1)              # v5p-3 is held back whole
    request = Request(8, 4, slice=4)
    placed = place(fleet, request)
    assert placed.ok and {r.domain for r in placed.ranks} == {"v5p-0", "v5p-1"}
    commit(fleet, placed, request, "job")
    fleet.upsert_node(host("v5p-0-2", "v5p-0", ready=False))
    result = replace(fleet, placed, ["v5p-0-2"], request, "job", spares_only=True)
    assert result.action == "move", result.reason
    by_rank = [r.domain for r in sorted(result.ranks, key=lambda r: r.rank)]
    assert len(set(by_rank[:4])) == 1 and len(set(by_rank[4:])) == 1
    assert "v5p-0" not in by_rank and len(set(by_rank)) == 2


def tpu_job(workers: int, slice_size: int | None) -> dict[str, Any]:
    topology = {"slice": {"size": slice_size}} if slice_size else {}
    return training_job(workers=workers, acceleratorsPerWorker=4, topology=topology,
                        launcher={"type": "jax", "port": 8080})


def test_jax_workers_get_their_slices_hosts_and_the_megascale_variables() -> None:
    spec = tpu_job(8, 4)
    env = env_of(build.worker_pod(spec, 5, 0, Fabric("google.com/tpu", 4)))
    hosts = [f"w{i}.llama.team-a.svc" for i in range(4, 8)]  # the gang's headless Service
    assert [build.worker_dns(spec, i) for i in range(4, 8)] == hosts
    assert env["TPU_WORKER_ID"] == "1" and env["TPU_WORKER_HOSTNAMES"] == ",".join(hosts)
    assert (env["MEGASCALE_NUM_SLICES"], env["MEGASCALE_SLICE_ID"]) == ("2", "1")
    assert env["MEGASCALE_COORDINATOR_ADDRESS"] == build.worker_dns(spec, 0)
    assert env["MEGASCALE_PORT"] == "8080"
    assert "MASTER_ADDR" not in env and "NCCL_SOCKET_IFNAME" not in env


def test_one_slice_needs_no_megascale() -> None:
    spec = tpu_job(4, None)
    assert TrainingJobSpec.model_validate(spec["spec"]).launcher.type == "jax"
    env = env_of(build.worker_pod(spec, 3, 0, Fabric("google.com/tpu", 4)))
    assert env["TPU_WORKER_ID"] == "3"
    assert env["TPU_WORKER_HOSTNAMES"].split(",") == [build.worker_dns(spec, i)
                                                      for i in range(4)]
    assert not any(k.startswith("MEGASCALE_") for k in env)
