"""The small records a decision hands the controller: events, condition updates,
reservations and probe starts."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypeVar, cast

from goodput_operator.api.conditions import Conditions, kept, set_condition
from goodput_operator.api.statuses import (
    ConditionDict,
    InferenceEndpointStatusDict,
    TrainingJobStatusDict,
    UltraServerGroupStatusDict,
)

Obj = dict[str, Any]
# what each decision writes (api/statuses.py, generated): mypy checks every key
JobStatus = TrainingJobStatusDict
EndpointStatus = InferenceEndpointStatusDict
GroupStatus = UltraServerGroupStatusDict
T = TypeVar("T")


class Memo(dict[Any, Any]):
    """What one pass works out once and several decisions read (which nodes a pod spec
    fits, the turns at placement, who holds standby domains): each answer worked out by
    the first decision that asks (`recall`), the memo emptied as the next pass starts
    (State.fits). A cache, not a channel: an answer is the same whoever asks first."""

    def recall(self, key: Any, work: Callable[[], T]) -> T:
        if key not in self:
            self[key] = work()
        return cast(T, self[key])


class Event(NamedTuple):
    """A Kubernetes Event on the decided object, emitted after its status write."""

    type: Literal["Normal", "Warning"]
    reason: str  # CamelCase, as kubectl shows it
    message: str


class ConditionUpdate(NamedTuple):
    type: str
    status: bool
    reason: str
    message: str


def apply_conditions(conditions: Conditions, updates: list[ConditionUpdate],
                     generation: int | None, at: str) -> list[ConditionDict]:
    found = kept(conditions, "")  # every condition, as read back (api.conditions.kept)
    for update in updates:
        found = set_condition(found, update.type, update.status, update.reason,
                              update.message, generation, at)
    return found


class Reservation(NamedTuple):
    """Accelerators a decision placed a pod on, to count against the node from the moment
    the controller applies it (before the pod exists or binds)."""

    group: str
    pod_key: str  # namespace/name
    node: str
    accelerators: int
    owner: str


class ProbeStart(NamedTuple):
    """Start probe run RUN on NODE (a Job; nothing happens if that run's Job exists)."""

    group: str
    node: str
    trigger: Literal["start", "suspicion", "schedule"]
    run: int


OwnerKey = tuple[str, str, str]  # an object by kind, namespace and name


class Refusal(NamedTuple):
    """The API server refused to create a workload's children for good (an invalid pod, a
    PodSecurity or webhook denial; not a conflict or throttling) TIMES passes in a row."""

    times: int
    message: str  # the API server's words, naming the child
    at: float = 0.0  # when the last refusal came (the next try waits 2**times s after it)

    def retry_at(self) -> float:
        """2**times s after the last refusal, at most 256 s: a refusal the admin lifts
        (a quota raised) is noticed within minutes, not days later."""
        return self.at + 2.0 ** min(self.times, 8)


def changed_keys(current: Mapping[str, Any], desired: Mapping[str, Any]) -> set[str]:
    """The keys of DESIRED a status write would change in CURRENT: what kube.write_status
    writes, and what a decision folding a refresh into that write must agree with."""
    return {key for key, value in desired.items() if current.get(key) != value}


@dataclass
class Quota:
    """What Kueue allows a job this pass, and what the operator must write to Kueue
    (decide.quota)."""

    workload: str  # the Workload's name
    hold: bool  # no new pods, no placement: not admitted (or quota being given back)
    condition: ConditionUpdate  # the job's Admitted condition
    node_labels: dict[str, str] = field(default_factory=dict)  # the admitted flavors'
    evicted: str | None = None  # Kueue evicted it: the workers stop (decide.preemption)
    create: Obj | None = None  # a Workload to create
    patch: Obj | None = None  # a status patch of the Workload below
    target: Obj | None = None  # the Workload the patch is for (its resourceVersion)
    wake_at: float | None = None  # a refused create is tried again then (Refusal.retry_at)
    owner: OwnerKey | None = None  # whose Workload `create` is (its refusal is noted there)
    foreign: bool = False  # the Workload found is not the object's: never written to
    remove: Obj | None = None  # the object's own Workload, outdated: deleted (made anew)

    @property
    def message(self) -> str:
        return self.condition.message
