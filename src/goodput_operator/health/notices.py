"""Notices that a node is about to go, as the clusters we run on carry them.

On EKS the AWS Node Termination Handler taints a node when EC2 announces a Spot
interruption (two minutes ahead), a rebalance recommendation, scheduled maintenance or an
Auto Scaling termination; Karpenter taints a node it is about to disrupt; `kubectl drain`
(and every tool built on it) cordons before it evicts. Each is evidence an admin's tooling
wrote on a cluster-scoped object no tenant may change (TENANCY.md): it asks the gang on
that node to save now and move its ranks before the node goes.

Pure: a node body in, a Notice out. The cache remembers when each notice was first seen
(`first_seen`): a NoSchedule taint carries no time of its own, and a level-based pass must
not move a deadline forward every time it looks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from goodput_operator import times
from goodput_operator.api.ultraservergroup import NoticeDeadlines

Obj = dict[str, Any]

# the marks others put on a node before it goes (not ours: names.py holds ours)
NTH_SPOT_TAINT = "aws-node-termination-handler/spot-itn"  # Spot: two minutes' notice
NTH_REBALANCE_TAINT = "aws-node-termination-handler/rebalance-recommendation"
NTH_MAINTENANCE_TAINT = "aws-node-termination-handler/scheduled-maintenance"
NTH_ASG_TAINT = "aws-node-termination-handler/asg-lifecycle-termination"
KARPENTER_DISRUPTED_TAINT = "karpenter.sh/disrupted"  # Karpenter v1 (NoSchedule)
KARPENTER_DISRUPTION_TAINT = "karpenter.sh/disruption"  # before v1 (value "disrupting")
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"  # a cordon (kubectl drain's first step)

# taint key -> the kind of notice (how long the gang may take to save: the group's
# noticeDeadlineSeconds, api.ultraservergroup.NoticeDeadlines)
KINDS: dict[str, str] = {
    NTH_SPOT_TAINT: "SpotInterruption",  # EC2's two-minute warning
    NTH_REBALANCE_TAINT: "RebalanceRecommendation",  # no time named
    NTH_MAINTENANCE_TAINT: "ScheduledMaintenance",
    NTH_ASG_TAINT: "AutoScalingTermination",
    KARPENTER_DISRUPTED_TAINT: "KarpenterDisruption",
    KARPENTER_DISRUPTION_TAINT: "KarpenterDisruption",
    UNSCHEDULABLE_TAINT: "Drain",  # a cordon: the drain follows
}


@dataclass(frozen=True)
class Notice:
    """NODE goes soon: why (KIND, the taint's KEY), when it was first seen, and by when
    the gang's save must be done (after it, the node counts as lost anyway)."""

    node: str
    kind: str
    key: str
    since: float
    deadline: float

    def message(self) -> str:
        return (f"{self.kind} notice on node {self.node} ({self.key}), seen "
                f"{times.millis(self.since)}: saving and moving its ranks by "
                f"{times.millis(self.deadline)}")


def notice_key(node: Mapping[str, Any]) -> str | None:
    """The first notice taint NODE carries (a cordon counts), None when it carries none."""
    spec = node.get("spec") or {}
    for taint in spec.get("taints") or []:
        key = taint.get("key")
        if key in KINDS and (key != KARPENTER_DISRUPTION_TAINT
                             or taint.get("value") == "disrupting"):
            return str(key)
    return UNSCHEDULABLE_TAINT if spec.get("unschedulable") else None


def notice_of(name: str, node: Mapping[str, Any], first_seen: float,
              deadlines: NoticeDeadlines | None = None) -> Notice | None:
    """NODE's notice, first seen at FIRST_SEEN, due by its group's DEADLINES for its kind
    (None: the defaults); None when it carries none."""
    key = notice_key(node)
    if key is None:
        return None
    kind = KINDS[key]
    lead = (deadlines or NoticeDeadlines()).seconds(kind)
    return Notice(name, kind, key, first_seen, first_seen + lead)


def observe(name: str, node: Mapping[str, Any], now: float, seen: dict[str, float]) -> None:
    """Remember when NAME's notice was first seen (forgotten when it is lifted)."""
    if notice_key(node) is None:
        seen.pop(name, None)
    else:
        seen.setdefault(name, now)
