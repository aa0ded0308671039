"""A job's checkpoint advice (health.advice) in its status, and whether its own interval
is near it: the CheckpointInterval condition (False, FarFromAdvice, when it is over twice
as long or half as short). Advice only: the job's trainer follows it when it asks
(sdk.checkpoint_interval()); nothing is enforced."""

from __future__ import annotations

from goodput_operator import times
from goodput_operator.api.statuses import CheckpointAdviceDict
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.api.views import JobView
from goodput_operator.decide.snapshot import Snapshot
from goodput_operator.decide.types import ConditionUpdate
from goodput_operator.health.advice import Advice, advise
from goodput_operator.health.quarantine import decayed


def advice_for(snapshot: Snapshot, view: JobView, spec: TrainingJobSpec, gang: list[str]
               ) -> tuple[CheckpointAdviceDict | None, ConditionUpdate | None]:
    """The advice for the job VIEW shows, placed on the nodes GANG (None: nothing to rest
    it on yet), and its condition."""
    name = spec.ultra_server_group
    fleet, group = snapshot.fleets[name], snapshot.groups[name]
    half_life = group.quarantine.lemon_half_life_days
    scores = snapshot.memo.recall(("lemons", name), lambda: sum(  # as of this pass's clock
        decayed(*n.lemon_raised, snapshot.clock, half_life) for n in fleet.nodes.values()
        if n.lemon_raised[0] > 0))
    created = times.parse(((snapshot.group_objects.get(name) or {}).get("metadata") or {})
                          .get("creationTimestamp"))
    nodes = len(gang) or spec.workers
    history = (view.status.get("checkpoint") or {}).get("history") or []
    advice = advise(scores, len(fleet.nodes), nodes, half_life,
                    snapshot.clock - (created or snapshot.clock), history)
    if advice is None:
        return None, None
    return as_status(advice), ConditionUpdate(
        "CheckpointInterval", not advice.far_off,
        "FarFromAdvice" if advice.far_off else "NearAdvice", said(advice))


def as_status(advice: Advice) -> CheckpointAdviceDict:
    """ADVICE as status.checkpointAdvice, to two significant digits: the figures drift as
    incident scores decay, and a status write per pass for that would be waste."""
    found: CheckpointAdviceDict = {
        "intervalSeconds": _two(advice.interval_seconds),
        "saveSeconds": _two(advice.save_seconds), "mtbfSeconds": _two(advice.mtbf_seconds),
        "nodeFailuresPerDay": _two(advice.node_failures_per_day)}
    if advice.measured_seconds is not None:
        found["measuredSeconds"] = _two(advice.measured_seconds)
    return found


def said(advice: Advice) -> str:
    own = "not measured yet" if advice.measured_seconds is None else \
        f"{_two(advice.measured_seconds):g}s"
    return (f"advised {_two(advice.interval_seconds):g}s between saves (a save stalls "
            f"{_two(advice.save_seconds):g}s; the job's nodes fail every "
            f"{_two(advice.mtbf_seconds):g}s together); the job's own: {own}")


def _two(value: float) -> float:
    """VALUE to two significant digits."""
    return float(f"{value:.2g}")
