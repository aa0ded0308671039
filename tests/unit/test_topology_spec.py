"""`spec.topology` reaches the placement engine: each field (unit, policy, balance, slice)
changes where a TrainingJob is placed, through the whole decision (decide_jobs), so a
change that dropped one of them on the way to the engine fails here."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator.decide import decide_jobs, trial
from goodput_operator.topology.record import ranks_of
from tests.unit.fleets import node
from tests.unit.world import job, placed, worker, world

pytestmark = pytest.mark.unit
Obj = dict[str, Any]


def fleet(domains: int, blocks: int = 1) -> dict[str, Obj]:
    """us-0.. of 4 nodes, the domains spread over BLOCKS network blocks in turn."""
    bodies = {}
    for d in range(domains):
        for s in range(4):
            name = f"us{d}-n{s}"
            body = node(name, f"us-{d}", f"b{d % blocks}", labels={"pool": "trn2"})
            body["metadata"]["resourceVersion"] = "1"
            bodies[name] = body
    return bodies


def busy(*nodes: str) -> tuple[Obj, list[Obj]]:
    """A running one-worker-per-node job holding NODES (one domain's each)."""
    holder = job(f"busy-{nodes[0]}", workers=len(nodes), status={
        "phase": "Running", "placement": placed(*nodes, domain=f"us-{nodes[0][2]}")})
    return holder, [worker(holder, rank, node_name=n, phase="Running", ready=True)
                    for rank, n in enumerate(nodes)]


def spread(bodies: dict[str, Obj], taken: list[str], workers: int,
           topology: Obj) -> dict[str, int] | None:
    """Where the job of WORKERS with TOPOLOGY goes, beside jobs on TAKEN (one busy job
    per node): its workers per domain, or None when it waits."""
    holders = [busy(n) for n in taken]
    subject = job("subject", workers=workers, topology=topology)
    snapshot = world(bodies, [subject, *(h for h, _ in holders)],
                     [p for _, pods in holders for p in pods])
    with trial(snapshot):
        [decided, *_] = decide_jobs(snapshot, [])
    if decided.placement is None:
        return None
    counts: dict[str, int] = {}
    for rank in ranks_of(decided.placement):
        counts[rank["domain"]] = counts.get(rank["domain"], 0) + 1
    return counts


# us-0, us-1 and us-2 each with 2 nodes free: 6 workers need 3 domains, not the fewest 2
THREE_HALVES = ["us0-n0", "us0-n1", "us1-n0", "us1-n1", "us2-n0", "us2-n1"]
# blocks b0 (us-0, us-2) and b1 (us-1, us-3): 3 free in us-0 and 2 in us-1, the rest taken
ACROSS_BLOCKS = ["us0-n0", "us1-n0", "us1-n1", *(f"us{d}-n{s}" for d in (2, 3)
                                                 for s in range(4))]


@pytest.mark.parametrize(("what", "bodies", "taken", "workers", "topology", "expected"), [
    ("domain unit, required: waits for the fewest domains that hold it",
     fleet(3), THREE_HALVES, 6, {}, None),
    ("node unit: any nodes will do", fleet(3), THREE_HALVES, 6, {"unit": "node"},
     {"us-0": 2, "us-1": 2, "us-2": 2}),
    ("domain unit, preferred: spreads wider rather than wait", fleet(3), THREE_HALVES, 6,
     {"policy": "preferred"}, {"us-0": 2, "us-1": 2, "us-2": 2}),
    ("packed by default: one whole domain and the rest", fleet(2), [], 6, {},
     {"us-0": 4, "us-1": 2}),
    ("balance: split evenly", fleet(2), [], 6, {"balance": True}, {"us-0": 3, "us-1": 3}),
    ("three free a domain: 6 workers fit", fleet(2), ["us0-n0", "us1-n0"], 6, {},
     {"us-0": 3, "us-1": 3}),
    ("slices of 2: each domain holds one whole slice, 6 do not fit", fleet(2),
     ["us0-n0", "us1-n0"], 6, {"slice": {"size": 2}}, None),
    ("domain unit: across blocks when no block holds it", fleet(4, blocks=2),
     ACROSS_BLOCKS, 5, {}, {"us-0": 3, "us-1": 2}),
    ("block unit, required: waits for one block that holds it", fleet(4, blocks=2),
     ACROSS_BLOCKS, 5, {"unit": "block"}, None),
])
def test_each_topology_field_changes_where_the_gang_goes(
        what: str, bodies: dict[str, Obj], taken: list[str], workers: int, topology: Obj,
        expected: dict[str, int] | None) -> None:
    assert spread(bodies, taken, workers, topology) == expected, what


# b0 (us-0, us-2) holds 6 only as 4+2; b1 (us-1, us-3) has 2 free: an even 2+2+2 leaves b0
UNEVEN_BLOCK = ["us2-n0", "us2-n1", *(f"us1-n{s}" for s in range(4)), "us3-n0", "us3-n1"]


@pytest.mark.parametrize(("what", "topology", "expected"), [
    ("block, preferred, balance: inside the block first, evenness second",
     {"unit": "block", "policy": "preferred", "balance": True}, {"us-0": 4, "us-2": 2}),
    ("block, required, balance: waits for a block with an even split",
     {"unit": "block", "balance": True}, None),
    ("domain, preferred, balance: spreads wider, evenly (the domain is its level)",
     {"policy": "preferred", "balance": True}, {"us-0": 2, "us-2": 2, "us-3": 2}),
])
def test_staying_inside_the_requested_level_comes_before_an_even_split(
        what: str, topology: Obj, expected: dict[str, int] | None) -> None:
    assert spread(fleet(4, blocks=2), UNEVEN_BLOCK, 6, topology) == expected, what
