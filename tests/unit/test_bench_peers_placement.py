"""The Kueue TAS head-to-head (bench/peers_placement.py): what it reads from Kueue, how it
counts, and the sandbox's kwok stage that keeps a peer's gangs running (no Kueue here:
the run itself needs the sandbox)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench import peers_placement as bench

from goodput_operator.sandbox import cluster
from goodput_operator.sandbox import fleet as fleets

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("assignment", "nodes"), [
    ({"levels": ["kubernetes.io/hostname"], "slices": [{
        "domainCount": 2, "podCounts": {"universal": 1},
        "valuesPerLevel": [{"individual": {"prefix": "trn2-04-", "roots": ["0", "1"]}}]}]},
     ["trn2-04-0", "trn2-04-1"]),
    ({"levels": ["kubernetes.io/hostname"], "slices": [
        {"domainCount": 1, "podCounts": {"individual": [2]},
         "valuesPerLevel": [{"universal": "n-a"}]},
        {"domainCount": 2, "podCounts": {"individual": [1, 3]},
         "valuesPerLevel": [{"individual": {"roots": ["n-b", "n-c"]}}]}]},
     ["n-a", "n-a", "n-b", "n-c", "n-c", "n-c"]),
    ({}, []),
])
def test_a_tas_assignment_reads_as_one_node_per_pod(assignment: dict[str, object],
                                                   nodes: list[str]) -> None:
    assert bench.assigned_nodes(assignment) == nodes  # type: ignore[arg-type]


def test_the_yardsticks_count_what_each_system_placed_on_the_same_nodes() -> None:
    chosen = fleets.load("synthetic:trn2:4")
    nodes = fleets.pool_nodes(chosen, chosen.spec.pools[0])
    sizes = [4, 2, 2, 8, 4]  # 16 nodes: the 8 is refused once two UltraServers are broken
    outcomes = bench.ours(nodes, sizes)
    assert [len(got) if got else None for got in outcomes] == [4, 2, 2, 8, None]
    row = bench.summary("ours", nodes, sizes, outcomes, prefix=4)
    assert (row["placed"], row["before_first_refusal"]) == (4, 4)
    assert row["paired"] == row["end"] == {
        "domains_above_minimum": 0, "whole_free_domains": 0, "largest_gang": 0}
    spread = [["trn2-00-0", "trn2-01-0", "trn2-02-0", "trn2-03-0"], None]
    scattered = bench.summary("scattered", nodes, [4, 4], spread, prefix=1)
    assert scattered["paired"] == {"domains_above_minimum": 3, "whole_free_domains": 0,
                                   "largest_gang": 9}  # 3 free in each of 3
    assert bench.first_refusal(spread) == 1


def test_kwoks_pod_complete_stage_spares_pods_that_keep_running() -> None:
    kwok = ("spec:\n  selector:\n    matchExpressions:\n    - key: '.status.phase'\n"
            "      operator: 'In'\n")
    played = cluster.stage_text(cluster.COMPLETE_STAGE, kwok)
    assert (f"    - key: '.metadata.labels[\"{cluster.KEEP_RUNNING}\"]'\n"
            "      operator: 'DoesNotExist'\n    - key: '.status.phase'") in played
    assert cluster.stage_text("other.yaml", kwok) == kwok
    assert cluster.stage_text(cluster.COMPLETE_STAGE, "spec: {}\n") == "spec: {}\n"


def test_a_gang_refused_while_its_nodes_were_free_is_told_from_one_refused_for_want_of_them(
        ) -> None:
    sizes = [4, 8, 2, 4, 2]
    outcomes: bench.Outcomes = [["a"] * 4, None, ["b"] * 2, ["c"] * 4, None]
    # of 16 nodes: the 8 refused with 12 free, the last 2 with 6 free
    assert bench.refused_with_room(16, sizes, outcomes) == [1, 4]
    # of 10: the 8 refused with 6 free, the last 2 with none
    assert bench.refused_with_room(10, sizes, outcomes) == []
    chosen = fleets.load("synthetic:trn2:4")
    nodes = fleets.pool_nodes(chosen, chosen.spec.pools[0])
    row = bench.summary("ours", nodes, [4, 16], [["trn2-00-0"] * 4, None], prefix=1)
    assert row["refused_with_room"] == []  # 12 nodes free for the 16 asked


@pytest.mark.parametrize(("workers", "unit"), [(1, "domain"), (4, "domain"), (5, "block"),
                                               (16, "block")])
def test_the_operator_is_asked_what_the_peers_are_asked(workers: int, unit: str) -> None:
    from goodput_operator.api.trainingjob import TrainingJobSpec
    spec = TrainingJobSpec.model_validate(bench.training_job("g", workers)["spec"])
    assert (spec.workers, spec.topology.unit, spec.topology.policy) == (
        workers, unit, "required")
    assert spec.accelerators_per_worker == bench.GROUP.accelerator.per_node


def test_a_controllers_usage_is_read_from_proc(tmp_path: Path) -> None:
    import os
    import shutil
    import subprocess

    from bench import harness
    found = shutil.which("sleep")
    assert found is not None
    sleep = str(tmp_path / "controller")  # a name no other process has
    os.symlink(found, sleep)
    with subprocess.Popen([sleep, "30"]) as proc:
        try:
            # polled: the child may show its parent's command for a moment after the fork
            harness.wait_until(lambda: harness.process_of(sleep) == proc.pid, 10,
                               "the child found by its command")
        finally:
            proc.kill()
    assert harness.process_of("/no/such/executable") is None
    used = bench.usage(os.getpid(), 0.0)
    assert used["cpu_s"] > 0 and used["peak_rss_mib"] > 1
    assert bench.usage(None, 0.0) == {"cpu_s": None, "peak_rss_mib": None}


def test_the_replay_submits_in_order_and_refuses_what_is_not_placed_in_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "ADMIT_SECONDS", 0.5)
    submitted: list[tuple[str, int]] = []
    refused: list[str] = []
    outcomes, waits = bench.replay(
        [2, 16, 1], lambda name, workers: submitted.append((name, workers)),
        lambda name, workers: None if workers > 4 else [f"{name}-node"] * workers,
        refused.append)
    assert submitted == [("g0", 2), ("g1", 16), ("g2", 1)]
    assert outcomes == [["g0-node"] * 2, None, ["g2-node"]]
    assert refused == ["g1"] and len(waits) == 2
