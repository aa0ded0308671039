"""The placement benchmark reads fleet files and JSON-lines traces (no timing asserted)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from bench import placement as bench

from goodput_operator.topology.placement import (
    Companion,
    CompanionSlot,
    Placement,
    RankSlot,
    Request,
)
from tests.unit.fleets import trn2

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def test_trace_file_on_a_fleet_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = [
        {"t": 0, "op": "submit", "job": "a", "workers": 8, "acceleratorsPerWorker": 16,
         "unit": "domain", "policy": "required"},
        {"t": 1, "op": "submit", "job": "b", "workers": 2, "acceleratorsPerWorker": 16,
         "unit": "domain", "policy": "required"},
        {"t": 2, "op": "submit", "job": "c", "workers": 8, "acceleratorsPerWorker": 16,
         "unit": "domain", "policy": "required"},
        {"t": 3, "op": "finish", "job": "a"},
        {"t": 4, "op": "submit", "job": "d", "workers": 8, "acceleratorsPerWorker": 16,
         "unit": "domain", "policy": "required"},
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert bench.main(["--fleet", str(ROOT / "examples/fleets/trn2.yaml"), "--trace", str(trace),
                       "--json"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out[out.index("{"):])["results"][0]
    engines = {e["engine"]: e for e in result["engines"]}
    assert set(engines) == {"ours", "first-fit", "spread", "bestfit-tas"}
    # 16 nodes in 4 UltraServers: a (2 whole), b (half of a third), c cannot get 2 whole
    # UltraServers until a finishes; then d takes a's.
    assert engines["ours"]["placed"] == 3 and engines["ours"]["rejected"] == 1
    assert engines["ours"]["placed_before_first_rejection"] == 2
    assert engines["ours"]["mean_extra_domains"] == 0
    assert result["paired"]["bestfit-tas"]["ours_whole_free_domains"] >= 0


def test_generated_trace_is_seeded_and_well_formed() -> None:
    shape, _ = bench.fleet_nodes("trn2", 16)
    first = bench.generate_trace(shape, 16, 50, seed=7)
    assert first == bench.generate_trace(shape, 16, 50, seed=7)
    submits = [e for e in first if e.op == "submit"]
    assert len(submits) == 50
    assert all(e.request and e.request.workers >= 1 for e in submits)
    assert [e.t for e in first] == sorted(e.t for e in first)


def test_the_admission_rule_holds_every_engine_to_the_new_request_kinds() -> None:
    """An uneven split, a slice over two domains or a leader outside the workers' domain
    is a rejection, whichever engine made it."""
    fleet = trn2(2)

    def ranks(*nodes: str) -> tuple[RankSlot, ...]:
        return tuple(RankSlot(i, n, fleet.nodes[n].domain, fleet.nodes[n].slot)
                     for i, n in enumerate(nodes))
    three_one = Placement(True, "", ranks("us0-n0", "us0-n1", "us0-n2", "us1-n0"),
                          ("us-0", "us-1"), 1)
    two_two = Placement(True, "", ranks("us0-n0", "us0-n1", "us1-n0", "us1-n1"),
                        ("us-0", "us-1"), 1)
    assert not bench.admissible(fleet, Request(4, 16, "node", balance=True), three_one)
    assert bench.admissible(fleet, Request(4, 16, "node", balance=True), two_two)
    assert not bench.admissible(fleet, Request(4, 16, "node", slice=2), three_one)
    assert bench.admissible(fleet, Request(4, 16, "node", slice=2), two_two)
    led = Request(4, 16, "node", companions=(Companion("leader", 1, 0),))
    assert not bench.admissible(fleet, led, two_two)  # no leader placed
    leader_in = dataclasses.replace(two_two, companions=(
        CompanionSlot("leader", 0, "us1-n3", "us-1"),))
    assert bench.admissible(fleet, led, leader_in)


def test_a_fleet_files_pool_is_chosen_by_name_and_36_node_ultraservers_pack_whole(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Trn3 Gen2 (36 servers x 4 chips): a whole-UltraServer gang takes one of the two, a
    half one the other; a second whole one must wait until the half finishes."""
    trace = tmp_path / "trace.jsonl"
    rows = [{"t": 0, "op": "submit", "job": "whole", "workers": 36, "acceleratorsPerWorker": 4,
             "unit": "domain", "policy": "required"},
            {"t": 1, "op": "submit", "job": "half", "workers": 18, "acceleratorsPerWorker": 4,
             "unit": "domain", "policy": "required"},
            {"t": 2, "op": "submit", "job": "again", "workers": 36, "acceleratorsPerWorker": 4,
             "unit": "domain", "policy": "required"}]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert bench.main(["--fleet", "trn3", "--pool", "trn3-gen2", "--trace", str(trace),
                       "--json"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out[out.index("{"):])["results"][0]
    assert result["fleet"] == "trn3/trn3-gen2"
    ours = {e["engine"]: e for e in result["engines"]}["ours"]
    assert (ours["placed"], ours["rejected"], ours["mean_extra_domains"]) == (2, 1, 0)
    with pytest.raises(SystemExit, match="no pool 'gen3'"):
        bench.main(["--fleet", "trn3", "--pool", "gen3", "--trace", str(trace)])
