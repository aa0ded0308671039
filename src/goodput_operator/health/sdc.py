"""Silent data corruption: cross-replica voting, numeric guards, verified checkpoints.

Pure. Data-parallel replicas hold the same model shard and must agree bit for bit at every
step they report. Per step and shard, the fingerprints are voted on: a value held by a
strict majority of the replicas expected wins; replicas that disagree with it are
*suspects* (their nodes are quarantined); without such a majority — a tie, or too few
reports — the step is *unverifiable* and nobody is blamed. A checkpoint is *verified* when
its step was voted unanimous and nothing (divergence, NaN/Inf, loss spike) was seen at or
before it in this attempt; on suspicion the job rolls back to the newest verified one.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

Outcome = Literal["agree", "diverged", "unverifiable"]
RECENT_LOSSES = 20  # the losses a spike is judged against


@dataclass(frozen=True)
class Vote:
    step: int
    shard: str
    outcome: Outcome
    suspects: tuple[int, ...] = ()  # ranks in the minority
    majority: str | None = None
    message: str = ""


def vote(step: int, shard: str, fingerprints: Mapping[int, str], expected: int) -> Vote:
    """Judge one step of one shard from the replicas' fingerprints (rank -> value)."""
    expected = max(expected, len(fingerprints))
    quorum = expected // 2 + 1
    counts = Counter(fingerprints.values())
    missing = expected - len(fingerprints)
    if not counts:
        return Vote(step, shard, "unverifiable", message=f"step {step}: no reports")
    value, held = counts.most_common(1)[0]
    tie = len(counts) > 1 and list(counts.values()).count(held) > 1
    if held < quorum or tie:
        spread = ", ".join(f"{v[:8]}x{n}" for v, n in counts.most_common())
        why = "a tie" if tie else f"{held} agree, a majority needs {quorum}"
        return Vote(step, shard, "unverifiable",
                    message=f"step {step} shard {shard}: no majority ({why}; {spread}; "
                            f"{missing} of {expected} replicas missing)")
    suspects = tuple(sorted(r for r, v in fingerprints.items() if v != value))
    if not suspects:
        note = f" ({missing} missing)" if missing else ""
        return Vote(step, shard, "agree", majority=value,
                    message=f"step {step} shard {shard}: {held} replicas agree{note}")
    return Vote(step, shard, "diverged", suspects, value,
                message=f"step {step} shard {shard}: rank(s) {', '.join(map(str, suspects))} "
                        f"disagree with {held} of {expected} replicas (majority {value[:16]}, "
                        f"theirs " + ", ".join(fingerprints[r][:16] for r in suspects) + ")")


def guard(step: int, metrics: Mapping[str, float], recent: Sequence[float],
          spike_factor: float | None) -> str | None:
    """Evidence against a step from its numbers: non-finite values, or a loss above
    SPIKE_FACTOR x the median of the RECENT losses. Against the step, not a node."""
    for name, value in sorted(metrics.items()):
        if not math.isfinite(value):
            return f"step {step}: {name} is {value}"
    loss = metrics.get("loss")
    if spike_factor is not None and loss is not None and len(recent) >= 5:
        median = statistics.median(recent)
        if median > 0 and loss > spike_factor * median:
            return (f"step {step}: loss {loss:.4g} is over {spike_factor}x the recent median "
                    f"{median:.4g}")
    return None


MAX_PENDING_STEPS = 64  # steps a ledger waits on at once (reports arrive in step order)
MAX_JUDGED_STEPS = 4096  # steps whose verdicts are kept (checkpoints are of recent ones)


@dataclass
class Ledger:
    """One attempt's reports, voted on as steps complete. Kept by the operator per job."""

    replicas: int  # data-parallel replicas per shard (workers / shards)
    attempt: int = 0  # the job's restart these reports belong to
    max_shards: int = 100_000  # spec.sdc.shards: more shard names are a worker's junk
    pending: dict[int, dict[str, dict[int, str]]] = field(default_factory=dict)
    unanimous: set[int] = field(default_factory=set)  # steps every shard agreed on
    shard_votes: dict[int, dict[str, Outcome]] = field(default_factory=dict)
    shards: set[str] = field(default_factory=set)
    # the latest losses reported (by any rank), for the spike guard's median: only the
    # recent ones are kept (every rank reports every step, for days)
    losses: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_LOSSES))
    newest_judged: int = -1
    # ranks already blamed in this attempt: their later divergent steps are the same
    # evidence, not a new finding (a corrupted replica keeps disagreeing until it stops)
    suspected: set[int] = field(default_factory=set)

    def newly_suspected(self, ranks: Iterable[int]) -> list[int]:
        """The ranks of RANKS not blamed before in this attempt (marked blamed now)."""
        new = [r for r in ranks if r not in self.suspected]
        self.suspected.update(new)
        return new

    def add(self, step: int, shard: str, rank: int, value: str) -> list[Vote]:
        """Record one fingerprint; return the votes this completes. A step is judged when
        every replica of a shard reported it, or — with whatever arrived — once a later
        step has been judged (late or lost reports do not hold verification forever), and
        only once. Bounded whatever a worker sends (TENANCY.md rule 4): shard names beyond
        the job's shards are dropped, at most MAX_PENDING_STEPS steps wait (the oldest is
        judged with what arrived to make room; an older one is dropped), and the verdicts
        of the newest MAX_JUDGED_STEPS steps are kept."""
        if shard not in self.shards:
            if len(self.shards) >= self.max_shards:
                return []
            self.shards.add(shard)
        if shard in self.shard_votes.get(step, {}):
            # judged already: a report arriving after its step's verdict is too late to
            # change it (alone it could only make the step unverifiable), and judging it
            # again would cost a status write per late report of a large gang
            return []
        votes: list[Vote] = []
        if step not in self.pending and len(self.pending) >= MAX_PENDING_STEPS:
            oldest = min(self.pending)
            if step < oldest:
                return []
            votes += [self._judge(oldest, other) for other in list(self.pending[oldest])]
        self.pending.setdefault(step, {}).setdefault(shard, {})[rank] = value
        if len(self.pending[step][shard]) >= self.replicas:
            votes.append(self._judge(step, shard))
        for older in sorted(s for s in self.pending if s < self.newest_judged):
            for other in list(self.pending.get(older, {})):
                votes.append(self._judge(older, other))
        if len(self.shard_votes) > MAX_JUDGED_STEPS * 5 // 4:  # now and then: amortized
            for old in sorted(self.shard_votes)[:len(self.shard_votes) - MAX_JUDGED_STEPS]:
                del self.shard_votes[old]
                self.unanimous.discard(old)
        return votes

    def _judge(self, step: int, shard: str) -> Vote:
        reports = self.pending[step].pop(shard)
        if not self.pending[step]:
            del self.pending[step]
        result = vote(step, shard, reports, self.replicas)
        outcomes = self.shard_votes.setdefault(step, {})
        outcomes[shard] = result.outcome
        if all(outcomes.get(s) == "agree" for s in self.shards):
            self.unanimous.add(step)
        else:
            self.unanimous.discard(step)
        self.newest_judged = max(self.newest_judged, step)
        return result


def verified(step: int, unanimous: set[int], diverged: int | None,
             guarded: int | None) -> bool:
    """A checkpoint at STEP is verified: its step was unanimous, and no divergence or
    guard came at or before it."""
    return step in unanimous and (diverged is None or step < diverged) and \
        (guarded is None or step < guarded)


def rollback_target(history: Sequence[Mapping[str, object]], before: int | None
                    ) -> Mapping[str, object] | None:
    """The newest verified checkpoint from before step BEFORE (the first bad step)."""
    candidates = [c for c in history if c.get("verified")
                  and (before is None or int(str(c["step"])) < before)]
    return max(candidates, key=lambda c: int(str(c["step"])), default=None)


Obj = dict[str, object]


def absorb(sdc: Obj, votes: Sequence[Vote], guard_message: str | None, step: int,
           unanimous: set[int]) -> tuple[Obj, list[Vote]]:
    """The job's `status.sdc` after VOTES (and a guard on STEP); the divergent votes."""
    sdc = dict(sdc)
    divergent = []
    for result in sorted(votes, key=lambda v: v.step):
        sdc["lastVote"] = result.message
        if result.outcome == "diverged":
            divergent.append(result)
            first = sdc.get("divergedStep")
            if first is None or result.step < int(str(first)):
                sdc["divergedStep"], sdc["divergence"] = result.step, result.message
        elif result.outcome == "unverifiable":
            sdc["unverifiableSteps"] = int(str(sdc.get("unverifiableSteps") or 0)) + 1
        elif result.step in unanimous:
            newest = sdc.get("verifiedStep")
            sdc["verifiedStep"] = max(result.step, int(str(newest))) if newest is not None \
                else result.step
    first_guard = sdc.get("guardedStep")
    if guard_message and (first_guard is None or step < int(str(first_guard))):
        sdc["guardedStep"], sdc["guard"] = step, guard_message
    return sdc, divergent


def corrupt(checkpoint: Obj, step: int, path: str, why: str) -> Obj | None:
    """`status.checkpoint` with the checkpoint at STEP and PATH marked corrupt and `latest`
    the newest committed one that is not; None when no such checkpoint is on record (only
    the job's own committed checkpoints can be marked)."""
    history = [dict(e) for e in checkpoint.get("history") or []]  # type: ignore[attr-defined]
    found = [e for e in history if int(str(e["step"])) == step and e.get("path") == path]
    if not found:
        return None
    for entry in found:
        entry["corrupt"], entry["verified"] = why, False
    good = [e for e in history if not e.get("corrupt")]
    newest = max(good, key=lambda e: int(str(e["step"])), default=None)
    latest = {k: v for k, v in newest.items() if k not in ("verified", "corrupt")} \
        if newest is not None else None
    result = {**checkpoint, "history": history, "latest": latest}
    verified = checkpoint.get("latestVerified") or {}
    if verified.get("step") == step and verified.get("path") == path:  # type: ignore[attr-defined]
        result["latestVerified"] = None  # settle() finds the newest good one again
    return result


def settle(checkpoint: Obj, sdc: Obj, unanimous: set[int], strict: bool) -> Obj:
    """`status.checkpoint` with each recorded checkpoint's `verified` brought up to date
    and `latestVerified` the newest verified one. STRICT: verification needs votes;
    otherwise every committed checkpoint counts (there is nothing to check against)."""
    diverged = sdc.get("divergedStep")
    guarded = sdc.get("guardedStep")
    history = []
    for entry in checkpoint.get("history") or []:  # type: ignore[attr-defined]
        record = dict(entry)
        step = int(str(record["step"]))
        if record.get("corrupt"):  # found bad on load: never a resume point again
            record["verified"] = False
            history.append(record)
            continue
        agreed = bool(record.get("verified")) or step in unanimous or not strict
        record["verified"] = verified(step, {step} if agreed else set(),
                                      None if diverged is None else int(str(diverged)),
                                      None if guarded is None else int(str(guarded)))
        history.append(record)
    result = {**checkpoint, "history": history}
    target = rollback_target(history, None)
    if target is not None:
        result["latestVerified"] = {k: v for k, v in target.items() if k != "verified"}
    elif strict:
        result["latestVerified"] = None  # a merge patch removes it
    return result
