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
from goodput_operator.decide.attempt import Lost
from goodput_operator.decide.snapshot import Snapshot
from goodput_operator.health.notices import Notice, notice_of

NOTICE = "Notice"  # the Lost reason, and the incident's cause


def notices(snapshot: Snapshot, group: str, nodes: Iterable[str]) -> list[Notice]:
    """The notices on NODES of GROUP, in name order, each dated from when it was first
    seen and due by the group's noticeDeadlineSeconds. Only a cordoned node can carry one
    (topology.model.node_state): a gang's other nodes cost a lookup, not a look at their
    taints."""
    fleet, spec = snapshot.fleets[group], snapshot.groups.get(group)
    deadlines = spec.notice_deadline_seconds if spec is not None else None
    found = []
    for name in set(nodes):
        member, node = fleet.nodes.get(name), snapshot.nodes.get(name)
        notice = None if node is None or member is None or member.state != "cordoned" \
            else notice_of(name, node, snapshot.noticed.get(name, snapshot.clock), deadlines)
        if notice is not None:
            found.append(notice)
    return sorted(found, key=lambda n: n.node)


def lost_to(view: JobView, notice: Notice, clock: float) -> Lost | None:
    """NOTICE's node as lost to the job, from the commit of the first checkpoint after the
    notice, or from its deadline; None while neither has come."""
    latest = ((view.status.get("checkpoint") or {}).get("latest") or {})
    saved = times.parse(latest.get("time"))
    if saved is not None and saved >= notice.since:
        gone, how = saved, f"saved at step {latest.get('step')}"
    elif clock >= notice.deadline:
        gone, how = notice.deadline, "the deadline passed unsaved"
    else:
        return None
    return Lost(f"{notice.kind} notice on the node ({notice.key}); {how}", gone, NOTICE)


def pending(snapshot: Snapshot, view: JobView, gang: Iterable[str]
            ) -> tuple[NodeNoticeDict | None, float | None]:
    """The notice the running gang on the nodes GANG must save for (the earliest pending;
    None: none), and when the pass must look again (its deadline)."""
    assert view.spec is not None
    waiting = [n for n in notices(snapshot, view.spec.ultra_server_group, gang)
               if lost_to(view, n, snapshot.clock) is None]
    if not waiting:
        return None, None
    first = min(waiting, key=lambda n: (n.deadline, n.node))
    return {"node": first.node, "kind": first.kind, "since": times.millis(first.since),
            "deadline": times.millis(first.deadline)}, first.deadline
