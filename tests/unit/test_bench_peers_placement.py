"""The Kueue TAS head-to-head (bench/peers_placement.py): what it reads from Kueue, how it
counts, and the sandbox's kwok stage that keeps a peer's gangs running (no Kueue here:
the run itself needs the sandbox)."""

from __future__ import annotations

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
