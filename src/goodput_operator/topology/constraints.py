"""Which of a group's nodes a workload's pod may run on, as kube-scheduler judges it: the
node selector, the required node affinity, taints against tolerations, and the pod's
requests against the node's allocatable. Placement only considers these nodes, so it never
pins a gang where the scheduler would refuse it. Pure.

Not judged here: other pods' CPU and memory on the node (the fleet model counts devices
only): a pinned pod the scheduler still refuses for that is re-placed (decide.attempt).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from goodput_operator import names
from goodput_operator.api.base import HOSTNAME_LABEL, NODE_NAME_FIELD
from goodput_operator.topology.model import QuantityError, parse_quantity

Obj = Mapping[str, Any]
BLOCKING = ("NoSchedule", "NoExecute")  # PreferNoSchedule only steers the scheduler


def pod_requests(pod_spec: Obj) -> dict[str, Fraction]:
    """What the pod requests, as the scheduler sums it: its containers' requests (a limit
    stands for a missing request), or its largest init container's when that is more."""
    def of(container: Obj) -> dict[str, Fraction]:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        parsed = {}
        for key, value in wanted.items():
            try:
                parsed[key] = parse_quantity(value)
            except QuantityError:  # the API server refuses such a pod, and says why
                continue
        return parsed

    total: dict[str, Fraction] = {}
    for container in pod_spec.get("containers") or []:
        for key, value in of(container).items():
            total[key] = total.get(key, Fraction(0)) + value
    for container in pod_spec.get("initContainers") or []:
        for key, value in of(container).items():
            total[key] = max(total.get(key, Fraction(0)), value)
    return total


def _term_node(term: Obj) -> str | None:
    """The one node a node selector term names, by metadata.name (matchFields, as the
    DaemonSet controller writes it) or by hostname In [one value]; else None."""
    named = [e for e in [*(term.get("matchFields") or []), *(term.get("matchExpressions")
                                                                or [])]
             if e.get("key") in (NODE_NAME_FIELD, HOSTNAME_LABEL) and e.get("operator") == "In"
             and len(e.get("values") or []) == 1]
    nodes = {e["values"][0] for e in named}
    return nodes.pop() if len(nodes) == 1 else None


def pinned_node(pod_spec: Obj) -> str | None:
    """The one node a pod that has not bound can only go to (a foreign pod pinned there
    holds that node's devices as surely as a bound one): spec.nodeSelector's hostname, or a
    required node affinity whose every term names the same single node. The hostname label
    is taken to be the node's name, as the kubelet sets it."""
    by_selector = (pod_spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL)
    if by_selector:
        return str(by_selector)
    nodes = {_term_node(term) for term in _required_terms(pod_spec.get("affinity") or {})}
    return nodes.pop() if len(nodes) == 1 and None not in nodes else None


def _matches(expression: Obj, labels: Mapping[str, str]) -> bool:
    key, operator = expression.get("key", ""), expression.get("operator", "")
    values = list(expression.get("values") or [])
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            have, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def _required_terms(affinity: Obj) -> list[Obj]:
    """The node selector terms of a required node affinity (ORed; none: no constraint)."""
    required = ((affinity.get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    return list(required.get("nodeSelectorTerms") or [])


def _affinity_allows(affinity: Obj, labels: Mapping[str, str]) -> bool:
    terms = _required_terms(affinity)
    if not terms:
        return True
    return any(all(_matches(e, labels) for e in term.get("matchExpressions") or [])
               for term in terms)  # terms OR, expressions AND


def _tolerated(taint: Obj, tolerations: Iterable[Obj]) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration.get("key") == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and \
                toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def why_not(node: Obj, pod_spec: Obj, requests: Mapping[str, Fraction]) -> str | None:
    """Why kube-scheduler would refuse a pod of POD_SPEC (requesting REQUESTS) on NODE, or
    None. The operator's own quarantine taint is the fleet model's business, not this."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return f"nodeSelector {key}={value}"
    if not _affinity_allows(pod_spec.get("affinity") or {}, labels):
        return "required node affinity"
    tolerations = pod_spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in BLOCKING and taint.get("key") != names.QUARANTINE_TAINT \
                and not _tolerated(taint, tolerations):
            return f"taint {taint.get('key')}:{taint.get('effect')}"
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    for resource, amount in requests.items():
        try:
            have = parse_quantity(allocatable.get(resource, 0))
        except QuantityError:
            have = Fraction(0)
        if amount > have:
            return f"{resource} {float(amount):g} > allocatable {float(have):g}"
    return None


def eligibility(nodes: Iterable[Obj], pod_spec: Obj) -> tuple[frozenset[str] | None, str]:
    """The names of NODES a pod of POD_SPEC may run on, and why the others may not (the
    commonest reasons first); None when it may run on every one of them."""
    requests = pod_requests(pod_spec)
    fit: set[str] = set()
    refused: Counter[str] = Counter()
    for node in nodes:
        why = why_not(node, pod_spec, requests)
        if why is None:
            fit.add(node["metadata"]["name"])
        else:
            refused[why] += 1
    if not refused:
        return None, ""
    return frozenset(fit), "; ".join(f"{count} refuse it: {why}"
                                     for why, count in refused.most_common(3))
