"""An InferenceEndpoint's replica groups: observed groups -> which groups to create, place
and delete, for the desired count and the current revision (`decide.endpoint` wraps it
with placement and the status).

Groups are the unit of everything: a failed member (or a member on a lost node) restarts
its whole group; a rollout replaces whole groups, creating at most maxSurge extra and
keeping at least desired - maxUnavailable ready; scaling down removes the groups whose
removal frees whole domains first.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from goodput_operator import names
from goodput_operator.api.base import SHORT_MESSAGE_LENGTH, resolve
from goodput_operator.resources.pods import (
    FINISHED,
    is_gated,
    is_ready,
    refused_by_scheduler,
)
from goodput_operator.topology.replacement import ReplicaGroup, choose_scale_down

if TYPE_CHECKING:
    from goodput_operator.api.inferenceendpoint import Rollout

Obj = dict[str, Any]


class Removal(StrEnum):
    """Why a group is deleted: only a restart is news (a Warning event)."""

    RESTART = "Restart"  # a member stopped or its node was lost
    ROLLOUT = "Rollout"  # replaced by the new revision
    MOVE = "Move"  # placed again: its serving unit lost its decode groups, or the
    # scheduler refuses a member where it was pinned
    SCALE_DOWN = "ScaleDown"


@dataclass
class Group:
    index: int
    revision: str
    pods: dict[int, Obj] = field(default_factory=dict)  # member -> pod

    def nodes(self) -> list[str]:
        return [p["spec"].get("nodeName") or (p["metadata"].get("annotations") or {}).get(
            names.NODE_ANNOTATION, "") for _, p in sorted(self.pods.items())]

    def domain(self) -> str:
        return next(((p["metadata"].get("annotations") or {}).get(names.DOMAIN_ANNOTATION, "")
                     for p in self.pods.values()), "")

    def ready(self, size: int) -> bool:
        return len(self.pods) == size and all(is_ready(p) for p in self.pods.values())

    def gated(self) -> bool:
        return all(is_gated(p) for p in self.pods.values())


@dataclass
class EndpointPlan:
    create: list[tuple[int, str]] = field(default_factory=list)  # (group index, revision)
    complete: list[int] = field(default_factory=list)  # groups missing members: recreate
    delete: dict[int, str] = field(default_factory=dict)  # group index -> why, in words
    removal: dict[int, Removal] = field(default_factory=dict)  # group index -> why
    place: list[int] = field(default_factory=list)  # whole groups gated: place and pin
    groups: dict[int, Group] = field(default_factory=dict)
    ready: int = 0
    updated: int = 0
    live: int = 0


def groups_of(pods: list[Obj]) -> dict[int, Group]:
    groups: dict[int, Group] = {}
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        index = int(labels.get(names.REPLICA_LABEL, "-1"))
        group = groups.setdefault(index, Group(index, labels.get(names.REVISION_LABEL, "")))
        group.pods[int(labels.get(names.MEMBER_LABEL, "0"))] = pod
    return groups


ScaleDown = Callable[[dict[int, "Group"], int], list[int]]


def refused_members(pods: Iterable[Obj], now: float) -> tuple[dict[str, str], float | None]:
    """The pinned pods kube-scheduler has refused on their node for UNSCHEDULABLE_SECONDS
    (name: why, in words; resources.pods.refused_by_scheduler): their groups are placed
    again. And when the next refused one is due."""
    found, due = refused_by_scheduler(pods, now)
    return {r.pod: (f"the scheduler refuses {r.pod} on node {r.node} for "
                    f"{now - r.since:.0f}s: {r.message}"[:SHORT_MESSAGE_LENGTH])
            for r in found}, due


@dataclass(frozen=True)
class Wanted:
    """A role's groups as wanted: DESIRED groups of SIZE pods at REVISION, replaced as
    ROLLOUT allows."""

    size: int
    desired: int
    revision: str
    rollout: Rollout


@dataclass(frozen=True)
class Trouble:
    """What makes groups go: LOST nodes (quarantined, gone), groups MOVED elsewhere (why),
    pods STUCK where the scheduler refuses them (refused_members: placed again)."""

    lost: Collection[str] = frozenset()
    moved: Mapping[int, str] = field(default_factory=dict)
    stuck: Mapping[str, str] = field(default_factory=dict)


Removals = dict[int, tuple[Removal, str]]  # group index -> why it goes, kind and words


def plan_groups(pods: list[Obj], wanted: Wanted, trouble: Trouble = Trouble(),
                scale_down: ScaleDown | None = None) -> EndpointPlan:
    """The groups of PODS planned toward WANTED: restarted or moved for TROUBLE, rolled
    out, created, scaled down (SCALE_DOWN: which of the given groups to remove, this many;
    default: free whole domains first)."""
    groups = groups_of(pods)
    removed, live, complete = _triaged(groups, wanted.size, trouble)
    ready = {i for i, g in live.items() if g.ready(wanted.size)}
    rolled, create, new, old = _rolled_out(groups, live, ready, wanted)
    removed |= rolled
    excess = len(new) - wanted.desired
    if excess > 0 and not old:
        removed |= _scaled_down({i: g for i, g in sorted(new.items()) if i not in removed},
                                excess, scale_down)
    return EndpointPlan(
        create=create, complete=complete,
        delete={i: why for i, (_, why) in removed.items()},
        removal={i: kind for i, (kind, _) in removed.items()},
        place=sorted(i for i, g in live.items()
                     if i not in removed and g.gated() and len(g.pods) == wanted.size),
        groups=groups, live=len([i for i in live if i not in removed]),
        ready=len([i for i in ready if i not in removed]),
        updated=len([i for i in new if i not in removed]))


def _triaged(groups: dict[int, Group], size: int, trouble: Trouble
             ) -> tuple[Removals, dict[int, Group], list[int]]:
    """Groups restarted (a member stopped, a node lost) or moved (TROUBLE), the ones that
    live on, and those of them missing members (gated: recreated)."""
    removed: Removals = {}
    live: dict[int, Group] = {}
    complete: list[int] = []
    for index, group in groups.items():
        failed = [p["metadata"]["name"] for p in group.pods.values()
                  if p.get("status", {}).get("phase") in FINISHED]
        on_lost = sorted({n for n in group.nodes() if n in trouble.lost})
        refused = [trouble.stuck[p["metadata"]["name"]] for _, p in sorted(group.pods.items())
                   if p["metadata"]["name"] in trouble.stuck]
        if failed:
            removed[index] = (Removal.RESTART, f"member(s) {', '.join(failed)} stopped: "
                                               "restarting the group")
        elif on_lost:
            removed[index] = (Removal.RESTART, f"node(s) {', '.join(on_lost)} lost: "
                                               "restarting the group")
        elif index in trouble.moved:
            removed[index] = (Removal.MOVE, trouble.moved[index])
        elif refused:
            removed[index] = (Removal.MOVE, f"{refused[0]}; placing the group again")
        else:
            live[index] = group
            if len(group.pods) < size and group.gated():
                complete.append(index)
    return removed, live, complete


def _rolled_out(groups: dict[int, Group], live: dict[int, Group], ready: set[int],
                wanted: Wanted) -> tuple[Removals, list[tuple[int, str]], dict[int, Group],
                                         dict[int, Group]]:
    """The rollout: old groups removed (those not ready first, then as maxUnavailable
    allows), new ones created (up to maxSurge extra); and the groups on the new revision
    and the old ones left."""
    new = {i: g for i, g in live.items() if g.revision == wanted.revision}
    old = {i: g for i, g in live.items() if g.revision != wanted.revision}
    surge = resolve(wanted.rollout.max_surge, wanted.desired, round_up=True)
    unavailable = resolve(wanted.rollout.max_unavailable, wanted.desired, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1  # as Deployments do: progress must stay possible
    replaced = (Removal.ROLLOUT, "replaced by the new revision")
    # old groups that are not ready cost nothing to remove
    removed: Removals = {i: replaced for i in sorted(old) if i not in ready}
    old = {i: g for i, g in old.items() if i not in removed}
    room = wanted.desired + surge - len(new) - len(old)
    taken = set(groups)
    create = []
    for _ in range(max(0, min(room, wanted.desired - len(new)))):
        index = next(i for i in range(len(taken) + 1) if i not in taken)
        taken.add(index)
        create.append((index, wanted.revision))
    removable = len(ready) - (wanted.desired - unavailable)
    for index in sorted(old, key=lambda i: -i):
        if removable <= 0:
            break
        removed[index] = replaced
        removable -= 1 if index in ready else 0
    return removed, create, new, old


def _scaled_down(kept: dict[int, Group], excess: int, scale_down: ScaleDown | None
                 ) -> Removals:
    if scale_down is not None:
        return {chosen: (Removal.SCALE_DOWN, "scaling down")
                for chosen in scale_down(kept, excess)}
    choices = [ReplicaGroup(str(i), g.domain()) for i, g in kept.items()]
    return {int(index): (Removal.SCALE_DOWN, "scaling down (frees whole domains first)")
            for index in choose_scale_down(choices, excess)}
