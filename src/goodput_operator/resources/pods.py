"""What every workload's pods share: the placement gate and the pin that lifts it, and
reading a pod's attempt, rank and readiness. Pure builders and readers of pod dicts."""

from __future__ import annotations

import copy
from typing import Any

from goodput_operator import names

Obj = dict[str, Any]
HOSTNAME_LABEL = "kubernetes.io/hostname"
FINISHED = ("Succeeded", "Failed")


def pin(pod: Obj, node: str, domain: str | None) -> Obj:
    """The patch that pins a gated pod to its node and lets it schedule; the node is also
    recorded as an annotation, so the pod counts there before it binds.

    Node affinity may only be narrowed while a pod is gated: the hostname requirement is
    added to every existing term (a term list ORs), so the pod's own rules still hold.
    """
    spec = pod.get("spec", {})
    affinity = copy.deepcopy(spec.get("affinity") or {})
    required = affinity.setdefault("nodeAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    want = {"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}
    for term in terms:
        expressions = [e for e in term.get("matchExpressions") or []
                       if e.get("key") != HOSTNAME_LABEL]
        term["matchExpressions"] = [*expressions, want]
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


def is_gated(pod: Obj) -> bool:
    return any(g.get("name") == names.PLACEMENT_GATE
               for g in pod.get("spec", {}).get("schedulingGates") or [])


def attempt_of(pod: Obj) -> int:
    """The attempt (a TrainingJob's status.restarts) the pod was created for; -1: none."""
    return int(pod["metadata"].get("labels", {}).get(names.RESTART_LABEL, "-1"))


def index_of(pod: Obj) -> int:
    """The pod's rank in its gang; -1: none."""
    return int(pod["metadata"].get("labels", {}).get(names.RANK_LABEL, "-1"))


def is_ready(pod: Obj) -> bool:
    if pod.get("status", {}).get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions") or [])


def is_active(pod: Obj) -> bool:
    """Not finished: it still runs, or may."""
    return pod.get("status", {}).get("phase") not in FINISHED
