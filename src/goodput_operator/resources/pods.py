"""What every workload's pods share: the placement gate and the pin that lifts it, and
reading a pod's attempt, rank and readiness. Pure builders and readers of pod dicts."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from goodput_operator import names, times
from goodput_operator.api.base import NODE_NAME_FIELD

Obj = dict[str, Any]
FINISHED = ("Succeeded", "Failed")
MAX_NAME = 63  # a label value, a Service name, a hostname
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def child_name(base: str, suffix: str = "", *, dns_label: bool = False) -> str:
    """The name of a child of the object named BASE: BASE+SUFFIX when that is valid and
    short enough, else BASE cleaned, cut and tagged with a hash of BASE, so that two
    objects never share a child's name however their names truncate. DNS_LABEL: a
    DNS-1035 label (Services, pod subdomains and hostnames: no dots, a letter first);
    otherwise a DNS-1123 subdomain (pods, ConfigMaps); both at most 63 characters."""
    name = base + suffix
    if len(name) <= MAX_NAME and (_DNS_1035 if dns_label else _SUBDOMAIN).fullmatch(name):
        return name
    clean = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")
    if dns_label and not clean[:1].isalpha():
        clean = f"x{clean}"
    tag = hashlib.sha256(base.encode()).hexdigest()[:6]
    head = clean[:MAX_NAME - len(suffix) - len(tag) - 1].rstrip("-")
    return f"{head}-{tag}{suffix}"


def pin(pod: Obj, node: str, domain: str | None) -> Obj:
    """The patch that pins a gated pod to its node and lets it schedule; the node is also
    recorded as an annotation, so the pod counts there before it binds.

    The node is named by metadata.name (matchFields, as the DaemonSet controller pins its
    pods): the scheduler's node-affinity pre-filter then hands it that one node to check.
    A hostname label requirement looks the same to a reader but not to the scheduler,
    which filters every node of the cluster against it: at 20,000 nodes a rollout's pods
    waited 13 minutes to bind. Node affinity may only be narrowed while a pod is gated: the
    requirement is added to every existing term (a term list ORs), so the pod's own rules
    still hold (a template's own matchFields are refused at admission).
    """
    spec = pod.get("spec", {})
    affinity = copy.deepcopy(spec.get("affinity") or {})
    required = affinity.setdefault("nodeAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    want = {"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}
    for term in terms:
        fields = [e for e in term.get("matchFields") or [] if e.get("key") != NODE_NAME_FIELD]
        term["matchFields"] = [*fields, want]
    required["nodeSelectorTerms"] = terms
    gates = [g for g in spec.get("schedulingGates") or []
             if g.get("name") != names.PLACEMENT_GATE]
    annotations = {names.NODE_ANNOTATION: node,
                   **({names.DOMAIN_ANNOTATION: domain} if domain else {})}
    return {"metadata": {"annotations": annotations},
            "spec": {"affinity": affinity, "schedulingGates": gates}}


def pinned(pod: Obj, node: str, domain: str | None) -> Obj:
    """POD as it is created when its rank is already placed: the pin applied up front, so
    the pod is written once instead of created gated and patched."""
    patch = pin(pod, node, domain)
    result = copy.deepcopy(pod)
    result["metadata"].setdefault("annotations", {}).update(patch["metadata"]["annotations"])
    result["spec"]["affinity"] = patch["spec"]["affinity"]
    result["spec"]["schedulingGates"] = patch["spec"]["schedulingGates"]
    return result


def controller_of(obj: Obj) -> Obj | None:
    """OBJ's controller: its owner reference with controller true, if any."""
    return next((r for r in (obj.get("metadata") or {}).get("ownerReferences") or []
                 if isinstance(r, dict) and r.get("controller")), None)


def owned(pods: Iterable[Obj], owner: Obj) -> list[Obj]:
    """The PODS whose controller is OWNER, by UID: a pod that only carries an owner's
    labels (a tenant's own, or one left from a deleted namesake) is not its worker."""
    uid = owner["metadata"].get("uid")
    return [p for p in pods
            if any(ref.get("controller") and ref.get("uid") == uid
                   for ref in p["metadata"].get("ownerReferences") or [])]


def template_metadata(template: Obj, key: str) -> dict[str, str]:
    """The template's labels or annotations (KEY), less any in goodput.dev/: those are the
    operator's word about a pod (its job, rank, node, domain), never a tenant's."""
    found = (template.get("metadata") or {}).get(key) or {}
    return {k: v for k, v in found.items() if not _ours(k.partition("/")[0] if "/" in k else "")}


def _ours(prefix: str) -> bool:
    return prefix == names.PREFIX or prefix.endswith(f".{names.PREFIX}")


def is_gated(pod: Obj) -> bool:
    return any(g.get("name") == names.PLACEMENT_GATE
               for g in pod.get("spec", {}).get("schedulingGates") or [])


UNSCHEDULABLE_SECONDS = 30.0  # a pinned pod the scheduler refuses this long: placed again


@dataclass(frozen=True)
class Refused:
    """A pinned pod kube-scheduler refuses on its node: what placement could not see took
    the node first (another scheduler's pods binding in the same moment, other pods' CPU or
    memory, a device plugin short of devices)."""

    pod: str
    node: str
    since: float
    message: str  # the scheduler's


def refused_by_scheduler(pods: Iterable[Obj], now: float) -> tuple[list[Refused], float | None]:
    """The PODS pinned to a node, not bound and not gated, that kube-scheduler has marked
    Unschedulable for UNSCHEDULABLE_SECONDS by NOW (their workload places them again), and
    when the next one refused for less will have been (a wake-up), in one pass."""
    found: list[Refused] = []
    due: list[float] = []
    for pod in pods:
        node = (pod["metadata"].get("annotations") or {}).get(names.NODE_ANNOTATION)
        if not node or pod.get("spec", {}).get("nodeName") or is_gated(pod):
            continue
        for condition in pod.get("status", {}).get("conditions") or []:
            if condition.get("type") == "PodScheduled" and \
                    condition.get("status") == "False" and \
                    condition.get("reason") == "Unschedulable":
                since = times.parse(condition.get("lastTransitionTime"))
                if since is None:
                    break
                if now >= since + UNSCHEDULABLE_SECONDS:
                    found.append(Refused(pod["metadata"]["name"], node, since,
                                         condition.get("message", "")))
                else:
                    due.append(since + UNSCHEDULABLE_SECONDS)
                break
    return found, min(due, default=None)


def attempt_of(pod: Obj) -> int:
    """The attempt (a TrainingJob's status.restarts) the pod was created for; -1: none."""
    return _count_label(pod, names.RESTART_LABEL)


def index_of(pod: Obj) -> int:
    """The pod's rank in its gang; -1: none."""
    return _count_label(pod, names.RANK_LABEL)


def pod_set_of(pod: Obj) -> str:
    """The companion pod set (spec.podSets) a pod belongs to; "" for a worker."""
    return str((pod["metadata"].get("labels") or {}).get(names.POD_SET_LABEL, ""))


def companion_key(pod: Obj) -> tuple[str, int]:
    """A companion pod's (set, index), as its placement is recorded."""
    return pod_set_of(pod), _count_label(pod, names.POD_INDEX_LABEL)


def _count_label(pod: Obj, label: str) -> int:
    """A label holding a count, -1 when absent or not a plain count ("abc", "1e3", "-2"):
    a label anybody may write must never make a decision raise."""
    value = (pod["metadata"].get("labels") or {}).get(label, "")
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else -1


def is_ready(pod: Obj) -> bool:
    if pod.get("status", {}).get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions") or [])


def is_active(pod: Obj) -> bool:
    """Not finished: it still runs, or may."""
    return pod.get("status", {}).get("phase") not in FINISHED
