"""What the operator keeps of a pod and of a node, as types the API server's JSON is decoded
straight into.

A worker pod is about 8 KB of JSON, half of it managedFields and most of the rest env,
volumes and probes. `json.loads` builds every one of those fields as Python objects and
`slim_pod` then throws them away: about 100 ms a page of 500 pods, 16 s of a restart's
initial list at 45,000 pods. msgspec decodes into these shapes and skips every field they
do not name without building it: about 9 ms a page (bench/HISTORY.md, "restart").

The shapes name exactly what `state.slim_pod` and `state.slim_node` keep, so a decoded
object is what slimming the full one gives (a property test holds them to it). Leaf
values are `Any` and every nested shape may be null: a value of an unexpected type is
kept as it came, never an error that would lose a whole page.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict, cast

import msgspec

Obj = dict[str, Any]


class ObjectMeta(TypedDict, total=False):
    """Every ObjectMeta field but managedFields (often the biggest part of an object): a
    pod's and a node's."""

    name: Any
    generateName: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    generation: Any
    creationTimestamp: Any
    deletionTimestamp: Any
    deletionGracePeriodSeconds: Any
    labels: Any
    annotations: Any
    ownerReferences: Any
    finalizers: Any


class Container(TypedDict, total=False):
    name: Any
    resources: Any


class PodSpec(TypedDict, total=False):
    """What placement and accounting read: node, gates, affinity, each container's
    resources."""

    nodeName: Any
    schedulingGates: Any
    priority: Any
    affinity: Any
    tolerations: Any
    nodeSelector: Any
    containers: list[Container] | None


class Pod(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    metadata: ObjectMeta | None
    spec: PodSpec | None
    status: Any


class NodeSpec(TypedDict, total=False):
    taints: Any
    unschedulable: Any


class NodeStatus(TypedDict, total=False):
    """Allocatable, capacity and conditions (the Ready heartbeat: health.quarantine); a
    real node's images, addresses and system info are most of its bytes."""

    allocatable: Any
    capacity: Any
    conditions: Any


class Node(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    metadata: ObjectMeta | None
    spec: NodeSpec | None
    status: NodeStatus | None


class PodList(TypedDict, total=False):
    kind: Any
    metadata: Any
    items: list[Pod] | None


class NodeList(TypedDict, total=False):
    kind: Any
    metadata: Any
    items: list[Node] | None


class Event(TypedDict, total=False):
    """A watch event; its object is decoded once its type is known (an ERROR event's
    object is a Status, whose code and message a pod's shape would drop)."""

    type: Any
    object: msgspec.Raw


POD_SPEC_KEPT = tuple(k for k in PodSpec.__annotations__ if k != "containers")
NODE_METADATA_KEPT = tuple(ObjectMeta.__annotations__)
Decode = Callable[[bytes | str], Obj]


def decoder(shape: type) -> Decode:
    """A function from JSON text to a plain dict of SHAPE's fields."""
    return cast(Decode, msgspec.json.Decoder(shape).decode)


def event_decoder(shape: type) -> Decode:
    """A function from one watch event's JSON line to the event, its object in SHAPE
    (but an ERROR's Status whole)."""
    event, body = msgspec.json.Decoder(Event), decoder(shape)

    def decode(line: bytes | str) -> Obj:
        found = event.decode(line)
        raw = found.get("object")
        if raw is None:
            obj = None
        elif found.get("type") == "ERROR":
            obj = msgspec.json.decode(raw)
        else:
            obj = body(raw)
        return {"type": found.get("type"), "object": obj}
    return decode


decode_pods, decode_nodes = decoder(PodList), decoder(NodeList)
decode_pod_event, decode_node_event = event_decoder(Pod), event_decoder(Node)
