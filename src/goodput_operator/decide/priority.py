"""A TrainingJob's priority, from the objects the admin owns (TENANCY.md rule 2).

`spec.priority` is a number the tenant types, so it cannot decide anything between teams.
What does is `spec.priorityClassName`: a Kueue WorkloadPriorityClass, or else a Kubernetes
PriorityClass, of that name (Kueue looks them up in the same order); without one, the
PriorityClass marked `globalDefault`, or 0. Both kinds are cluster-scoped, so only the
admin makes them, and two annotations on them are the admin's grants:

- `goodput.dev/namespaces: "team-a,team-b"`: the only namespaces whose jobs may use the
  class (unset: every namespace); a job elsewhere is not placed, and says why.
- `goodput.dev/preempt-across-namespaces: "true"`: a `LowerPriority` job of this class may
  preempt lower-class jobs of *other* namespaces. Without it a job preempts only in its own
  namespace. A PriorityClass with `preemptionPolicy: Never` never preempts.

`spec.priority` keeps a meaning that harms no one else: the order among one namespace's
own jobs of the same class value (and preemption among them). Across namespaces only the
class value counts, and a namespace's jobs reorder only among the places in line its jobs
already hold (`in_order`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from goodput_operator import names

Obj = dict[str, Any]
T = TypeVar("T")

PRIORITY_CLASS = "scheduling.k8s.io/priorityclass"  # Kueue's priorityClassSource values
WORKLOAD_PRIORITY_CLASS = "kueue.x-k8s.io/workloadpriorityclass"
NAMESPACES_ANNOTATION = names.PRIORITY_NAMESPACES_ANNOTATION
ACROSS_NAMESPACES_ANNOTATION = names.PREEMPT_ACROSS_ANNOTATION
# every spec.priority fits strictly inside one class value's band of `Priority.key`
LOCAL_SPAN = 2_000_001


@dataclass(frozen=True)
class PriorityClass:
    """What the operator reads of a PriorityClass or WorkloadPriorityClass."""

    name: str
    value: int
    source: str  # PRIORITY_CLASS or WORKLOAD_PRIORITY_CLASS
    preempts: bool = True  # a PriorityClass's preemptionPolicy is not Never
    across_namespaces: bool = False  # the admin's grant (ACROSS_NAMESPACES_ANNOTATION)
    namespaces: frozenset[str] | None = None  # who may use it; None: every namespace
    global_default: bool = False


def priority_class(body: Obj, source: str) -> PriorityClass | None:
    """BODY as a class of SOURCE, or None when it has no integer value."""
    meta = body.get("metadata") or {}
    value = body.get("value")
    if not isinstance(value, int) or isinstance(value, bool) or not meta.get("name"):
        return None
    notes = meta.get("annotations") or {}
    allowed = notes.get(NAMESPACES_ANNOTATION)
    return PriorityClass(
        name=meta["name"], value=value, source=source,
        preempts=body.get("preemptionPolicy") != "Never",
        across_namespaces=str(notes.get(ACROSS_NAMESPACES_ANNOTATION, "")).lower() == "true",
        namespaces=None if allowed is None else
        frozenset(n.strip() for n in str(allowed)[:16384].split(",") if n.strip()),
        global_default=body.get("globalDefault") is True)


@dataclass(frozen=True)
class Classes:
    """Every class the admin made, by name, per kind."""

    workload: Mapping[str, PriorityClass] = field(default_factory=dict)
    pod: Mapping[str, PriorityClass] = field(default_factory=dict)

    def named(self, name: str) -> PriorityClass | None:
        return self.workload.get(name) or self.pod.get(name)

    def default(self) -> PriorityClass | None:
        """The globalDefault PriorityClass (the lowest-valued if several, as Kubernetes)."""
        defaults = [c for c in self.pod.values() if c.global_default]
        return min(defaults, key=lambda c: (c.value, c.name), default=None)


@dataclass(frozen=True)
class Priority:
    """A job's standing: VALUE from its class decides between namespaces; LOCAL
    (spec.priority) only among its own namespace's jobs."""

    namespace: str
    value: int = 0
    local: int = 0
    klass: PriorityClass | None = None
    problem: str | None = None  # why the named class cannot be used (the job waits)
    reason: str = ""  # the problem's condition reason

    def _compared(self, other: Priority) -> tuple[tuple[int, int], tuple[int, int]]:
        if other.namespace == self.namespace:
            return (self.value, self.local), (other.value, other.local)
        return (self.value, 0), (other.value, 0)

    def above(self, other: Priority) -> bool:
        mine, theirs = self._compared(other)
        return mine > theirs

    def at_least(self, other: Priority) -> bool:
        mine, theirs = self._compared(other)
        return mine >= theirs

    def may_preempt(self, other: Priority) -> bool:
        """Whether this job may make OTHER yield: strictly above it, by a class that may
        preempt, and in OTHER's namespace unless the admin granted the class more."""
        if self.problem is not None or not self.above(other):
            return False
        if self.klass is not None and not self.klass.preempts:
            return False
        return other.namespace == self.namespace or \
            (self.klass is not None and self.klass.across_namespaces)

    def rank_for(self, namespace: str) -> int:
        """One integer in this priority's order as a job of NAMESPACE compares it (the
        local part only within the same namespace): the order victims are chosen in."""
        local = self.local if namespace == self.namespace else 0
        return self.value * LOCAL_SPAN + local

    def workload_ref(self) -> Obj | None:
        """How a Kueue Workload names the class its priority came from (v1beta2)."""
        if self.klass is None:
            return None
        if self.klass.source == WORKLOAD_PRIORITY_CLASS:
            return {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                    "name": self.klass.name}
        return {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": self.klass.name}

    def describe(self) -> str:
        """How messages say it: class and value, then the namespace's own order."""
        said = [f"class {self.klass.name} ({self.value})" if self.klass else
                f"priority {self.value}" if self.value or not self.local else ""]
        if self.local:
            said.append(f"priority {self.local} within {self.namespace}")
        return ", ".join(s for s in said if s)


def resolve(namespace: str, class_name: str | None, local: int, classes: Classes) -> Priority:
    """The priority of a job of NAMESPACE naming CLASS_NAME (or none) with spec.priority
    LOCAL. A class that is missing or not granted to NAMESPACE is a problem to say: such a
    job counts as priority 0 and is not placed until the admin fixes it."""
    if not class_name:
        default = classes.default()
        return Priority(namespace, default.value if default else 0, local, default)
    found = classes.named(class_name)
    if found is None:
        return Priority(namespace, 0, local, None,
                        f"no WorkloadPriorityClass or PriorityClass named {class_name!r}",
                        "PriorityClassNotFound")
    if found.namespaces is not None and namespace not in found.namespaces:
        return Priority(namespace, 0, local, None,
                        f"priority class {class_name!r} is not granted to namespace "
                        f"{namespace!r} (its {NAMESPACES_ANNOTATION} annotation)",
                        "PriorityClassNotAllowed")
    return Priority(namespace, found.value, local, found)


def in_order(items: Sequence[T], priority: Callable[[T], Priority],
             arrival: Callable[[T], tuple[str, str]]) -> list[T]:
    """ITEMS first by class value (higher first), then ARRIVAL; then each namespace's items
    of one value are re-sorted by their local priority among the places they hold, so a
    tenant's spec.priority moves its own jobs and never another team's."""
    line = sorted(items, key=lambda i: (-priority(i).value, arrival(i)))
    places: dict[tuple[str, int], list[int]] = {}
    for at, item in enumerate(line):
        p = priority(item)
        places.setdefault((p.namespace, p.value), []).append(at)
    ordered = list(line)
    for held in places.values():
        mine = sorted((line[at] for at in held),
                      key=lambda i: (-priority(i).local, arrival(i)))
        for at, item in zip(held, mine, strict=True):
            ordered[at] = item
    return ordered


def of_job(job: Obj, classes: Classes) -> Priority:
    """JOB's priority read from its raw spec (the schema bounds both fields; anything
    else counts as unset, and the job's own validation says what is wrong)."""
    spec = job.get("spec") or {}
    local = spec.get("priority", 0)
    name = spec.get("priorityClassName")
    return resolve(job["metadata"]["namespace"], name if isinstance(name, str) else None,
                   local if isinstance(local, int) and not isinstance(local, bool) else 0,
                   classes)


def pod_class(priority: Priority) -> str | None:
    """The class a job's pods carry: its PriorityClass, so that the scheduler and the
    admin's ResourceQuotas see the same priority the operator decides by (a
    WorkloadPriorityClass leaves the pods' own, as in Kueue)."""
    klass = priority.klass
    return klass.name if klass is not None and klass.source == PRIORITY_CLASS else None


def with_pod_class(pods: Sequence[Obj], name: str | None) -> None:
    """PODS (bodies still to create) carry the PriorityClass NAME, if any."""
    if name is None:
        return
    for pod in pods:
        pod["spec"]["priorityClassName"] = name
        pod["spec"].pop("priority", None)  # the API server fills it in from the class
