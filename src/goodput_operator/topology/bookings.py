"""Which node a pod's devices count on before it binds (TENANCY.md rule 4: bookings only
for what is real).

A bound pod holds its node's devices. An unbound one is counted where it is going, so
that placement does not hand those devices to a gang too: the operator's own pods on the
node it pinned them to (its `goodput.dev/node` annotation), any other pod on the one node
its node selector or required affinity allows (constraints.pinned_node). A foreign pod
gets less trust, as it can be made never to bind: one with scheduling gates of its own
books nothing (it cannot bind until someone lifts them), and a pinned one that stays
unbound books its node for PINNED_UNBOUND_SECONDS after its creation and then no more.
`goodput.dev/*` annotations on a foreign pod mean nothing. What is ignored, and why, is
said on the group's status. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from goodput_operator import names, times
from goodput_operator.topology.constraints import pinned_node

Obj = Mapping[str, Any]
# long enough for the scheduler to bind a pod that can bind (it retries unschedulable
# pods at least every 5 minutes), short enough that a squatter frees the node soon
PINNED_UNBOUND_SECONDS = 300.0


@dataclass(frozen=True)
class Booking:
    node: str | None  # where the pod's devices count; None: nowhere
    ignored: str | None = None  # why a pod pinned to a node books nothing there
    pinned: str | None = None  # that node
    until: float | None = None  # a foreign pinned pod books only until then


def booking(pod: Obj, own: bool, now: float) -> Booking:
    """Where POD's devices count at NOW. OWN: the operator made it (proven by its
    controller's UID, never by a label or annotation)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if spec.get("nodeName"):
        return Booking(str(spec["nodeName"]))
    if own:
        node = (meta.get("annotations") or {}).get(names.NODE_ANNOTATION) or pinned_node(spec)
        return Booking(str(node) if node else None)
    node = pinned_node(spec)
    if node is None:
        return Booking(None)
    if spec.get("schedulingGates"):
        return Booking(None, f"pinned to {node} but held by scheduling gates of its own",
                       node)
    created = times.parse_foreign(meta.get("creationTimestamp"))
    until = (created if created is not None else now) + PINNED_UNBOUND_SECONDS
    if now >= until:
        return Booking(None, f"pinned to {node} and unbound for over "
                             f"{PINNED_UNBOUND_SECONDS:.0f} s", node)
    return Booking(node, until=until)
