"""A node of a running gang is about to go (health.notices: a Spot interruption, a
rebalance recommendation, scheduled maintenance, an Auto Scaling termination, Karpenter's
disruption, a drain): save now, then move.

While the notice is pending the job's status carries it (`status.notice`) and every step
report's answer asks the workers to save a checkpoint now (operator.reports.save_request,
the channel preemption uses). Once a checkpoint committed after the notice (or the
deadline passes, saved or not) the node counts as lost for the job with reason Notice: the
usual recovery moves its ranks to a spare (the node is no longer placeable: topology
treats it as cordoned) and the gang resumes from that fresh checkpoint. The incident's
cause is Notice, its own line in the books."""

from __future__ import annotations

from collections.abc import Iterable

from goodput_operator import times
from goodput_operator.api.statuses import NodeNoticeDict
from goodput_operator.api.views import JobView
from goodput_operator.decide.attempt import Lost, Spots
from goodput_operator.decide.snapshot import Snapshot
from goodput_operator.health.notices import Notice, notice_of
from goodput_operator.topology.model import Fleet

NOTICE = "Notice"  # the Lost reason, and the incident's cause


def notices(snapshot: Snapshot, fleet: Fleet, nodes: Iterable[str]) -> list[Notice]:
    """The notices on NODES of FLEET, in name order, each dated from when it was first
    seen. Only a cordoned node can carry one (topology.model.node_state): a gang's other
    nodes cost a lookup, not a look at their taints."""
    found = []
    for name in sorted(set(nodes)):
        member, node = fleet.nodes.get(name), snapshot.nodes.get(name)
        notice = None if node is None or member is None or member.state != "cordoned" \
            else notice_of(name, node, snapshot.noticed.get(name, snapshot.clock))
        if notice is not None:
            found.append(notice)
    return found


def gone_at(view: JobView, notice: Notice, clock: float) -> float | None:
    """When NOTICE's node stops counting for the job: the commit of the first checkpoint
    after the notice, or its deadline; None while neither has come."""
    latest = ((view.status.get("checkpoint") or {}).get("latest") or {})
    saved = times.parse(latest.get("time"))
    if saved is not None and saved >= notice.since:
        return saved
    return notice.deadline if clock >= notice.deadline else None


def lost_to(view: JobView, notice: Notice, clock: float) -> Lost | None:
    """NOTICE's node as lost to the job, once saved or out of time (gone_at)."""
    gone = gone_at(view, notice, clock)
    if gone is None:
        return None
    latest = ((view.status.get("checkpoint") or {}).get("latest") or {})
    how = (f"saved at step {latest.get('step')}" if gone != notice.deadline
           else "the deadline passed unsaved")
    return Lost(f"{notice.kind} notice on the node ({notice.key}); {how}", gone, NOTICE)


def pending(snapshot: Snapshot, view: JobView) -> tuple[NodeNoticeDict | None, float | None]:
    """The notice the running gang must save for (the earliest pending on its nodes; None:
    none), and when the pass must look again (its deadline)."""
    assert view.spec is not None
    fleet = snapshot.fleets[view.spec.ultra_server_group]
    waiting = [n for n in notices(snapshot, fleet, Spots(view.status.get("placement")).nodes())
               if gone_at(view, n, snapshot.clock) is None]
    if not waiting:
        return None, None
    first = min(waiting, key=lambda n: (n.deadline, n.node))
    return {"node": first.node, "kind": first.kind, "since": times.millis(first.since),
            "deadline": times.millis(first.deadline)}, first.deadline
