"""A group's accelerator-seconds, accounted (health.accounting): each accelerator in one
bucket at each moment, the buckets adding up to the whole however the passes fall, and
what a job's books learn afterwards moved from productive to its cause."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goodput_operator.decide import decide_groups
from goodput_operator.health import accounting
from goodput_operator.health.accounting import GAP_SECONDS, Ledger, Seen
from goodput_operator.times import millis
from tests.unit.fleets import trn2
from tests.unit.world import GROUP, NOW, job, nodes, not_ready, quarantined, worker, world

pytestmark = pytest.mark.unit
Obj = dict[str, Any]


def parts(account: Obj) -> float:
    """Every state's seconds and every badput cause's: what must make the whole."""
    return sum(account[s] for s in accounting.STATES) + sum(account["badput"].values())


def owner_of(namespace: str, name: str) -> str:
    return f"tj/{namespace}/{name}"


@pytest.mark.parametrize(("case", "expected"), [
    ("nothing placed: every accelerator idle", {("", "idle"): 64}),
    ("a spare per UltraServer", {("", "idle"): 48, ("", "spare"): 16}),
    ("a computing job's two nodes", {("", "idle"): 32, ("ns", "productive"): 32}),
    ("a job recovering, before its new placement",
     {("", "idle"): 32, ("ns", "replacement"): 32}),
    ("someone else's pod", {("", "idle"): 48, ("", "other"): 16}),
    ("an endpoint's replica", {("", "idle"): 48, ("team", "serving"): 16}),
    ("a standby domain", {("", "idle"): 0, ("team", "standby"): 64}),
])
def test_each_accelerator_is_in_one_bucket(case: str, expected: dict[tuple[str, str], int]
                                           ) -> None:
    fleet = trn2(domains=1, spares=1 if "spare" in case else 0)
    buckets: dict[str, accounting.Bucket] = {}
    if "job" in case:
        state = "replacement" if "recovering" in case else "productive"
        buckets[owner_of("ns", "j")] = state  # type: ignore[assignment]
        fleet.bind("ns/j-0", "us0-n0", 16, owner_of("ns", "j"))
        fleet.bind("ns/j-1", "us0-n1", 16, owner_of("ns", "j"))
    if "someone" in case:
        fleet.bind("x/pod", "us0-n0", 16, "pod/x/pod")
    if "endpoint" in case:
        fleet.bind("team/serve-0", "us0-n0", 16, "ie/team/serve")
    standby = {"us-0": "team/serve"} if "standby" in case else {}
    assert accounting.moment(fleet, buckets, standby) == {k: v for k, v in expected.items()
                                                          if v}


def test_a_job_with_a_rank_on_a_lost_node_is_in_detection_on_its_other_nodes() -> None:
    snapshot = world(nodes(us0_n1=not_ready(NOW - 5)))
    fleet = snapshot.fleets[GROUP]
    for rank in range(2):
        fleet.bind(f"ns/j-{rank}", f"us0-n{rank}", 16, owner_of("ns", "j"))
    held = accounting.moment(fleet, {owner_of("ns", "j"): "productive"}, {})
    assert held == {("ns", "detection"): 16, ("", "unavailable"): 16, ("", "idle"): 96}


def test_quarantined_and_unready_nodes_are_their_own_buckets() -> None:
    snapshot = world(nodes(us0_n0=quarantined(nodes()["us0-n0"], "NodeNotReady", NOW - 60),
                           us1_n3=not_ready(NOW - 5)))
    held = accounting.moment(snapshot.fleets[GROUP], {}, {})
    assert held == {("", "quarantined"): 16, ("", "unavailable"): 16, ("", "idle"): 96}


@pytest.mark.parametrize(("status", "bucket"), [
    ({}, "launch"),
    ({"goodput": {"stage": {"name": "launch", "since": millis(NOW)}}}, "launch"),
    ({"goodput": {"since": millis(NOW - 60)}}, "productive"),
    ({"goodput": {}, "incidents": [{"restart": 1, "cause": "NodeFailure",
                                    "detectedAt": millis(NOW)}]}, "replacement"),
    ({"goodput": {}, "incidents": [{"restart": 1, "cause": "NodeFailure",
                                    "detectedAt": millis(NOW), "replacedAt": millis(NOW)}]},
     "restart"),
    ({"goodput": {"since": millis(NOW)}, "incidents": [
        {"restart": 1, "cause": "NodeFailure", "runningAt": millis(NOW)}]}, "productive"),
])
def test_a_job_s_bucket_follows_its_books(status: Obj, bucket: str) -> None:
    assert accounting.job_bucket(status) == bucket  # type: ignore[arg-type]


def test_what_the_books_learn_later_moves_from_productive_to_its_cause() -> None:
    ledger = accounting.advanced(None, accounting.Counter({("ns", "productive"): 32}), NOW)
    ledger = accounting.advanced(ledger, ledger.moment, NOW + 100)
    assert ledger.group["productive"] == 3200
    learned = accounting.moves({"uid": ("ns", Seen(16, (30.0, 7.0)))},  # a rank gone
                               {"uid": Seen(32, (10.0, 2.0))})
    assert learned == [("ns", "lostWork", 640.0), ("ns", "checkpoint", 160.0)]
    moved = accounting.advanced(ledger, ledger.moment, NOW + 100, learned)
    assert (moved.group["productive"], moved.group["lostWork"], moved.group["checkpoint"]) == \
        (2400, 640, 160)
    assert moved.namespaces["ns"] == moved.group | {}  # the one namespace holds it all
    assert moved.whole == ledger.whole == 3200


def test_no_more_is_moved_than_was_counted_productive_and_new_jobs_move_nothing() -> None:
    ledger = Ledger(NOW, NOW, 100.0, {"productive": 100.0}, {"ns": {"productive": 100.0}})
    moved = accounting.advanced(ledger, accounting.Counter(), NOW,
                                [("ns", "lostWork", 1e6), ("other", "lostWork", 50.0)])
    assert {k: v for k, v in moved.group.items() if k != "unobserved"} == \
        {"productive": 0.0, "lostWork": 100.0}
    assert accounting.moves({"new": ("ns", Seen(16, (9.0, 9.0)))}, {}) == []
    back = accounting.advanced(moved, accounting.Counter(), NOW, [("ns", "lostWork", -30.0)])
    assert (back.group["productive"], back.group["lostWork"]) == (30.0, 70.0)


def test_a_gap_and_a_new_leader_s_first_pass_are_unobserved() -> None:
    held = accounting.Counter({("", "idle"): 64})
    ledger = accounting.advanced(None, held, NOW)
    after_gap = accounting.advanced(ledger, held, NOW + GAP_SECONDS + 1)
    assert after_gap.group == {"unobserved": 64 * (GAP_SECONDS + 1)}
    restored = accounting.from_status(accounting.to_status(ledger))
    assert restored is not None and not restored.moment
    assert accounting.advanced(restored, held, NOW + 10).group["unobserved"] == 640


MOMENTS = st.lists(st.tuples(
    st.floats(0, 2 * GAP_SECONDS),
    st.dictionaries(st.tuples(st.sampled_from(["", "a", "b"]),
                              st.sampled_from(accounting.STATES + accounting.CAUSES)),
                    st.integers(0, 64), max_size=6),
    st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(accounting.LATER),
                       st.floats(-1e5, 1e5)), max_size=3)), max_size=12)


@given(MOMENTS)
@settings(max_examples=200, deadline=None)
def test_the_parts_always_add_up_to_the_whole(steps: list[Any]) -> None:
    ledger, at = accounting.advanced(None, accounting.Counter(), NOW), NOW
    for seconds, held, learned in steps:
        at += seconds
        ledger = accounting.advanced(ledger, accounting.Counter(held), at, learned)
        account = accounting.to_status(ledger)
        assert parts(account) == pytest.approx(account["acceleratorSeconds"], abs=1e-3 * 20)
        assert all(v >= -1e-6 for v in ledger.group.values())
        restored = accounting.from_status(account)
        assert restored is not None and restored.whole == pytest.approx(ledger.whole, abs=1e-3)


def test_a_group_s_pass_accounts_its_jobs_and_writes_at_most_every_minute() -> None:
    running = job("dp", status={"phase": "Running", "goodput": {"since": millis(NOW - 600)}})
    pods = [worker(running, r, node_name=f"us0-n{r}", phase="Running", ready=True)
            for r in range(2)]
    first = decide_groups(world(jobs=[running], pods=pods), [])[0]
    assert first.write and first.ledger is not None
    assert first.desired["accounting"]["acceleratorSeconds"] == 0
    later = world(jobs=[running], pods=pods, clock=NOW + 30, accounts={GROUP: first.ledger},
                  accounted=first.seen, group_status=dict(first.desired))
    second = decide_groups(later, [])[0]
    account = second.desired["accounting"]
    assert account["productive"] == 32 * 30 and account["idle"] == 96 * 30
    assert account["namespaces"] == [{"namespace": "ns", "productive": 960, "serving": 0,
                                      "standby": 0, "badput": dict.fromkeys(
                                          accounting.CAUSES, 0), "total": 960}]
    assert not second.write and second.wake_at == NOW + 60  # only the figures moved
    assert decide_groups(world(jobs=[running], pods=pods, clock=NOW + 60,
                               accounts={GROUP: second.ledger}, accounted=second.seen,
                               group_status=dict(first.desired)), [])[0].write
