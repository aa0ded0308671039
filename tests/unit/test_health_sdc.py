"""SDC: voting among replicas, numeric guards, the ledger, verified checkpoints, rollback."""

from __future__ import annotations

import math

import pytest

from goodput_operator.health.sdc import (
    RECENT_LOSSES,
    Ledger,
    absorb,
    corrupt,
    guard,
    rollback_target,
    settle,
    verified,
    vote,
)

A, B, C = "a" * 32, "b" * 32, "c" * 32


@pytest.mark.parametrize(
    ("fingerprints", "expected", "outcome", "suspects"),
    [
        ({0: A, 1: A}, 2, "agree", ()),
        ({0: A, 1: B}, 2, "unverifiable", ()),               # 2 replicas: who is right?
        ({0: A, 1: A, 2: A}, 3, "agree", ()),
        ({0: A, 1: A, 2: B}, 3, "diverged", (2,)),
        ({0: A, 1: B, 2: C}, 3, "unverifiable", ()),          # three-way split
        ({0: A, 1: A}, 3, "agree", ()),                       # one missing, 2 of 3 agree
        ({0: A, 1: B}, 3, "unverifiable", ()),                # one missing, a tie
        ({0: A}, 3, "unverifiable", ()),                      # too few to be a majority
        ({i: A for i in range(8)}, 8, "agree", ()),
        ({**{i: A for i in range(7)}, 7: B}, 8, "diverged", (7,)),
        ({**{i: A for i in range(5)}, 5: B, 6: B, 7: C}, 8, "diverged", (5, 6, 7)),
        ({**{i: A for i in range(4)}, **{i: B for i in range(4, 8)}}, 8, "unverifiable", ()),
        ({i: A for i in range(4)}, 8, "unverifiable", ()),    # half reported: no quorum
        ({i: A for i in range(5)}, 8, "agree", ()),           # 5 of 8 is a majority
    ],
)
def test_voting(fingerprints: dict[int, str], expected: int, outcome: str,
                suspects: tuple[int, ...]) -> None:
    result = vote(250, "0", fingerprints, expected)
    assert (result.outcome, result.suspects) == (outcome, suspects)
    assert result.message.startswith("step 250")


def test_a_divergence_names_the_ranks_and_both_fingerprints() -> None:
    result = vote(250, "0", {0: A, 1: A, 2: B}, 3)
    assert "rank(s) 2 disagree with 2 of 3 replicas" in result.message
    assert A[:16] in result.message and B[:16] in result.message


@pytest.mark.parametrize(
    ("metrics", "recent", "fired"),
    [
        ({"loss": 2.0}, [2.0] * 10, None),
        ({"loss": math.nan}, [2.0] * 10, "loss is nan"),
        ({"grad_norm": math.inf}, [], "grad_norm is inf"),
        ({"loss": 9.0}, [2.0] * 10, "over 4.0x the recent median"),
        ({"loss": 9.0}, [2.0] * 3, None),                    # too little history
    ],
)
def test_guards_fire_on_non_finite_numbers_and_loss_spikes(
        metrics: dict[str, float], recent: list[float], fired: str | None) -> None:
    result = guard(300, metrics, recent, 4.0)
    assert (result is None) if fired is None else (fired in (result or ""))


def test_the_ledger_votes_when_every_replica_reported_and_catches_up_on_stragglers() -> None:
    ledger = Ledger(replicas=3)
    assert ledger.add(100, "0", 0, A) == [] and ledger.add(100, "0", 1, A) == []
    [done] = ledger.add(100, "0", 2, A)
    assert done.outcome == "agree" and 100 in ledger.unanimous
    ledger.add(200, "0", 0, A)                            # rank 1 and 2 never report 200
    for rank in range(3):
        votes = ledger.add(300, "0", rank, B if rank == 2 else A)
    assert [(v.step, v.outcome) for v in votes] == [(300, "diverged"), (200, "unverifiable")]
    assert ledger.unanimous == {100}


def test_a_report_after_its_steps_verdict_changes_nothing() -> None:
    """A rank's report of a step already judged (from its peers after a later step
    completed, or once every replica's had come): it neither un-verifies the step nor
    makes a vote (a vote is a status write, one per late report of a large gang)."""
    ledger = Ledger(replicas=3)
    for rank in range(3):
        ledger.add(100, "0", rank, A)
    ledger.add(200, "0", 0, A)                            # ranks 1 and 2 are late for 200
    for rank in range(3):
        ledger.add(300, "0", rank, A)                     # 300 judges 200 with what came
    assert ledger.add(100, "0", 1, A) == [] and ledger.add(200, "0", 2, B) == []
    assert ledger.add(200, "0", 1, A) == [] and not ledger.pending
    assert ledger.unanimous == {100, 300}


def test_the_ledger_keeps_only_the_recent_losses_the_spike_guard_reads() -> None:
    """Every rank reports its loss every step for days: the ledger must not keep them all
    (a 31,000-worker job at a 5 s step would add half a billion a day)."""
    ledger = Ledger(replicas=2)
    for step in range(1000):
        ledger.losses.append(1.0 + step)
    assert list(ledger.losses) == [1.0 + s for s in range(1000 - RECENT_LOSSES, 1000)]


def test_a_step_is_unanimous_only_when_every_shard_agreed() -> None:
    ledger = Ledger(replicas=2)
    for shard in ("0", "1"):
        ledger.add(10, shard, 0, A)
        ledger.add(10, shard, 1, A if shard == "0" else B)
    assert 10 not in ledger.unanimous


def test_verified_checkpoints_and_the_rollback_target() -> None:
    unanimous = {100, 200, 300}
    assert verified(200, unanimous, diverged=250, guarded=None)
    assert not verified(300, unanimous, diverged=250, guarded=None)
    assert not verified(200, unanimous, diverged=None, guarded=200)
    assert not verified(150, unanimous, diverged=None, guarded=None)
    history = [{"step": 100, "verified": True}, {"step": 200, "verified": True},
               {"step": 300, "verified": False}]
    assert rollback_target(history, 250) == {"step": 200, "verified": True}
    assert rollback_target(history, 150) == {"step": 100, "verified": True}
    assert rollback_target(history, 100) is None


def test_absorb_keeps_the_first_divergence_and_the_first_guard() -> None:
    later = vote(300, "0", {0: A, 1: A, 2: B}, 3)
    earlier = vote(250, "0", {0: A, 1: A, 2: C}, 3)
    tie = vote(260, "0", {0: A, 1: B}, 2)
    status, divergent = absorb({}, [later, earlier, tie], "step 270: loss is nan", 270, set())
    assert status["divergedStep"] == 250 and "step 250" in str(status["divergence"])
    assert [v.step for v in divergent] == [250, 300]
    assert status["unverifiableSteps"] == 1 and status["guardedStep"] == 270
    agreed = vote(200, "0", {0: A, 1: A, 2: A}, 3)
    status, _ = absorb(status, [agreed], None, 200, {200})
    assert status["verifiedStep"] == 200 and status["guardedStep"] == 270


@pytest.mark.parametrize(
    ("strict", "unanimous", "sdc", "verified_steps", "latest_verified"),
    [
        (False, set(), {}, [100, 200, 300], 300),               # nothing to check against
        (True, set(), {}, [], None),                            # no votes: nothing verified
        (True, {100, 200, 300}, {}, [100, 200, 300], 300),
        (True, {100, 200, 300}, {"divergedStep": 250}, [100, 200], 200),
        (True, {100, 300}, {"guardedStep": 100}, [], None),
    ],
)
def test_settle_marks_verified_checkpoints(strict: bool, unanimous: set[int], sdc: dict,
                                           verified_steps: list[int],
                                           latest_verified: int | None) -> None:
    checkpoint = {"latest": {"step": 300}, "history": [
        {"step": s, "path": f"/c/{s}", "verified": False} for s in (100, 200, 300)]}
    settled = settle(checkpoint, sdc, unanimous, strict)
    assert [h["step"] for h in settled["history"] if h["verified"]] == verified_steps
    assert (settled.get("latestVerified") or {}).get("step") == latest_verified


def test_a_replica_that_keeps_diverging_is_blamed_once_per_attempt() -> None:
    """Its later divergent steps are the same evidence: blaming again would re-quarantine
    its node after a person released it (found on real nodes: the corrupted replica goes on
    reporting until its pod is gone)."""
    ledger = Ledger(4)
    blamed: list[list[int]] = []
    for step in (25, 26, 27):
        for rank in range(4):
            for judged in ledger.add(step, "0", rank, "bad" if rank == 1 else "good"):
                if judged.suspects:
                    blamed.append(ledger.newly_suspected(judged.suspects))
    assert blamed == [[1], [], []]
    assert Ledger(4, attempt=1).newly_suspected([1]) == [1], "a new attempt starts afresh"


@pytest.mark.parametrize(("strict", "bad", "latest", "latest_verified"), [
    (False, [300], 200, 200),           # the newest is bad: both fall back to 200
    (False, [200], 300, 300),           # an older one is bad: nothing newer changes
    (True, [300], 200, 200),
    (False, [100, 200, 300], None, None),   # none left: a restart starts from scratch
])
def test_a_corrupt_checkpoint_is_never_resumed_from_again(
        strict: bool, bad: list[int], latest: int | None, latest_verified: int | None) -> None:
    checkpoint: dict = {"latest": {"step": 300, "path": "/c/300"},
                        "latestVerified": {"step": 300, "path": "/c/300"},
                        "history": [{"step": s, "path": f"/c/{s}", "verified": True}
                                    for s in (100, 200, 300)]}
    for step in bad:
        marked = corrupt(checkpoint, step, f"/c/{step}", "digest sha256:x, committed sha256:y")
        assert marked is not None
        checkpoint = settle(marked, {}, {100, 200, 300}, strict)
    assert (checkpoint.get("latest") or {}).get("step") == latest
    assert (checkpoint.get("latestVerified") or {}).get("step") == latest_verified
    assert [h["step"] for h in checkpoint["history"] if h.get("corrupt")] == bad
    assert all(not h["verified"] for h in checkpoint["history"] if h.get("corrupt"))


def test_only_a_checkpoint_on_record_can_be_marked_corrupt() -> None:
    checkpoint = {"history": [{"step": 100, "path": "/c/100", "verified": True}]}
    assert corrupt(checkpoint, 100, "/elsewhere/100", "x") is None
    assert corrupt(checkpoint, 200, "/c/200", "x") is None


def test_one_worker_cannot_grow_the_ledger_without_bound() -> None:
    """Junk steps and shard names from one rank: the ledger stays bounded (TENANCY.md
    rule 4) and the real shard is still judged."""
    from goodput_operator.health.sdc import MAX_JUDGED_STEPS, MAX_PENDING_STEPS, Ledger

    ledger = Ledger(replicas=2, max_shards=1)
    ledger.add(1, "0", 0, "a")
    for junk in range(1000):
        assert ledger.add(1, f"junk-{junk}", 0, "x") == []   # more shards than the job has
    assert ledger.shards == {"0"}
    for step in range(10, 10 + 20_000):                      # steps no other rank reports
        ledger.add(step, "0", 0, "a")
    assert len(ledger.pending) <= MAX_PENDING_STEPS
    assert len(ledger.shard_votes) <= MAX_JUDGED_STEPS * 5 // 4
    votes = ledger.add(30_000, "0", 0, "b") + ledger.add(30_000, "0", 1, "b")
    assert any(v.step == 30_000 and v.outcome == "agree" for v in votes)
