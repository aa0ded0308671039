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


def plan_groups(pods: list[Obj], size: int, desired: int, revision: str, rollout: Rollout,
                lost: Collection[str], scale_down: ScaleDown | None = None,
                moved: Mapping[int, str] | None = None,
                stuck: Mapping[str, str] | None = None) -> EndpointPlan:
    """SIZE: pods per group; LOST: nodes no longer usable (quarantined, gone); SCALE_DOWN:
    which of the given groups to remove, this many (default: free whole domains first);
    MOVED: groups to replace elsewhere, and why; STUCK: pods the scheduler refuses where
    they were pinned (refused_members): their groups are placed again."""
    result = EndpointPlan(groups=groups_of(pods))
    live: dict[int, Group] = {}
    for index, group in result.groups.items():
        failed = [p["metadata"]["name"] for p in group.pods.values()
                  if p.get("status", {}).get("phase") in FINISHED]
        on_lost = sorted({n for n in group.nodes() if n in lost})
        refused = [stuck[p["metadata"]["name"]] for _, p in sorted(group.pods.items())
                   if stuck and p["metadata"]["name"] in stuck]
        if failed:
            _remove(result, index, Removal.RESTART,
                    f"member(s) {', '.join(failed)} stopped: restarting the group")
        elif on_lost:
            _remove(result, index, Removal.RESTART,
                    f"node(s) {', '.join(on_lost)} lost: restarting the group")
        elif moved and index in moved:
            _remove(result, index, Removal.MOVE, moved[index])
        elif refused:
            _remove(result, index, Removal.MOVE, f"{refused[0]}; placing the group again")
        else:
            live[index] = group
            if len(group.pods) < size and group.gated():
                result.complete.append(index)
    new = {i: g for i, g in live.items() if g.revision == revision}
    old = {i: g for i, g in live.items() if g.revision != revision}
    surge = resolve(rollout.max_surge, desired, round_up=True)
    unavailable = resolve(rollout.max_unavailable, desired, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1  # as Deployments do: progress must stay possible

    ready = {i for i, g in live.items() if g.ready(size)}
    # old groups that are not ready cost nothing to remove
    for index in sorted(old):
        if index not in ready:
            _remove(result, index, Removal.ROLLOUT, "replaced by the new revision")
    old = {i: g for i, g in old.items() if i not in result.delete}
    room = desired + surge - len(new) - len(old)
    missing = desired - len(new)
    taken = set(result.groups)
    for _ in range(max(0, min(room, missing))):
        index = next(i for i in range(len(taken) + 1) if i not in taken)
        taken.add(index)
        result.create.append((index, revision))
    removable = len(ready) - (desired - unavailable)
    for index in sorted(old, key=lambda i: -i):
        if removable <= 0:
            break
        _remove(result, index, Removal.ROLLOUT, "replaced by the new revision")
        removable -= 1 if index in ready else 0
    excess = len(new) - desired
    if excess > 0 and not old:
        _scale_down(result, {i: g for i, g in sorted(new.items()) if i not in result.delete},
                    excess, scale_down)
    result.place = sorted(i for i, g in live.items()
                          if i not in result.delete and g.gated() and len(g.pods) == size)
    result.live = len([i for i in live if i not in result.delete])
    result.ready = len([i for i in ready if i not in result.delete])
    result.updated = len([i for i in new if i not in result.delete])
    return result


def _scale_down(result: EndpointPlan, kept: dict[int, Group], excess: int,
                scale_down: ScaleDown | None) -> None:
    if scale_down is not None:
        for chosen in scale_down(kept, excess):
            _remove(result, chosen, Removal.SCALE_DOWN, "scaling down")
        return
    choices = [ReplicaGroup(str(i), g.domain()) for i, g in kept.items()]
    for index in choose_scale_down(choices, excess):
        _remove(result, int(index), Removal.SCALE_DOWN, "scaling down (frees whole domains first)")


def _remove(result: EndpointPlan, index: int, removal: Removal, why: str) -> None:
    result.delete[index] = why
    result.removal[index] = removal
