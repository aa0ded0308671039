"""Pods and nodes decoded straight into the operator's shapes are what slimming the full
objects gives: nothing a decision reads is lost, and what it never reads is never built."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goodput_operator import names
from goodput_operator.controllers.shapes import (
    decode_node_event,
    decode_nodes,
    decode_pod_event,
    decode_pods,
)
from goodput_operator.controllers.state import slim_node, slim_pod

pytestmark = pytest.mark.unit

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=8)
EXTRA = st.dictionaries(st.sampled_from(["env", "volumes", "image", "x-new", "hostname"]),
                        JSON, max_size=3)


def worker_pod() -> dict[str, Any]:
    """A worker as the API server lists it: managedFields, env, volumes and status."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "llama-r1-w0", "generateName": "llama-", "namespace": "team-a",
            "uid": "u-1", "resourceVersion": "8297", "generation": 1,
            "creationTimestamp": "2026-11-28T21:12:47Z",
            "labels": {names.JOB_LABEL: "llama", names.RESTART_LABEL: "1"},
            "annotations": {names.NODE_ANNOTATION: "trn2-00-0"},
            "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "TrainingJob",
                                 "name": "llama", "uid": "j-1", "controller": True}],
            "finalizers": ["example.com/worker"],
            "managedFields": [{"manager": "goodput", "fieldsV1": {"f:spec": {"f:env": {}}}}]},
        "spec": {
            "nodeName": "trn2-00-0", "priority": 0,
            "schedulingGates": [{"name": names.PLACEMENT_GATE}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["trn2-00-0"]}]}]}}},
            "tolerations": [{"key": "aws.amazon.com/neuron", "operator": "Exists"}],
            "nodeSelector": {"node.kubernetes.io/instance-type": "trn2u.48xlarge"},
            "containers": [{"name": "trainer", "image": "neuron:2.26",
                            "env": [{"name": "RANK", "value": "0"}],
                            "resources": {"requests": {"aws.amazon.com/neuron": "16"},
                                          "limits": {"aws.amazon.com/neuron": "16"}}}],
            "volumes": [{"name": "hostfile", "configMap": {"name": "llama-hosts"}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"name": "trainer", "restartCount": 0}]}}


def worker_node() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "trn2-00-0", "uid": "n-1", "resourceVersion": "77",
                     "labels": {"topology.k8s.aws/ultraserver-id": "us-0"},
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                     "creationTimestamp": "2026-11-28T21:00:00Z",
                     "managedFields": [{"manager": "kubelet"}]},
        "spec": {"providerID": "aws:///i-0", "unschedulable": True,
                 "taints": [{"key": names.QUARANTINE_TAINT, "effect": "NoSchedule"}]},
        "status": {"allocatable": {"aws.amazon.com/neuron": "16"},
                   "capacity": {"aws.amazon.com/neuron": "16"},
                   "conditions": [{"type": "Ready", "status": "True"}],
                   "images": [{"names": ["neuron:2.26"], "sizeBytes": 10**10}],
                   "nodeInfo": {"kubeletVersion": "v1.36.3"}}}


def listed(kind: str, *items: dict[str, Any]) -> str:
    return json.dumps({"kind": kind, "metadata": {"resourceVersion": "9"},
                       "items": list(items)})


@settings(max_examples=60)
@given(spec=EXTRA, container=EXTRA, status=JSON)
def test_a_decoded_pod_is_the_slimmed_pod(spec: dict[str, Any], container: dict[str, Any],
                                          status: Any) -> None:
    """A pod has no top-level fields but the five; its status is kept whole."""
    full = worker_pod()
    full["spec"].update(spec)
    full["spec"]["containers"][0].update(container)
    full["status"] = status
    decoded = decode_pods(listed("PodList", full))["items"][0]
    assert slim_pod(copy.deepcopy(decoded)) == slim_pod(copy.deepcopy(full))
    assert "managedFields" not in decoded["metadata"]
    assert "env" not in decoded["spec"]["containers"][0]


@settings(max_examples=60)
@given(top=EXTRA, spec=EXTRA, status=EXTRA)
def test_a_decoded_node_is_the_slimmed_node(top: dict[str, Any], spec: dict[str, Any],
                                            status: dict[str, Any]) -> None:
    full = worker_node()
    full.update(top)
    full["spec"].update(spec)
    full["status"].update(status)
    decoded = decode_nodes(listed("NodeList", full))["items"][0]
    assert slim_node(copy.deepcopy(decoded)) == slim_node(copy.deepcopy(full))
    assert not {"images", "nodeInfo"} & set(decoded["status"])


def test_fields_of_an_unexpected_type_are_kept_as_they_came_not_an_error() -> None:
    """One odd object must never lose a whole page of pods."""
    odd = {"metadata": {"name": "odd", "labels": None, "generation": "one"}, "spec": None,
           "status": "strange"}
    hollow = {"metadata": {"name": "hollow"}, "spec": {"containers": None}}
    page = decode_pods(listed("PodList", odd, hollow, worker_pod()))
    assert [pod["metadata"]["name"] for pod in page["items"]] == ["odd", "hollow",
                                                                  "llama-r1-w0"]
    assert page["items"][0]["spec"] is None and page["items"][0]["status"] == "strange"
    assert slim_pod(page["items"][1])["spec"] == {"containers": []}
    assert page["metadata"] == {"resourceVersion": "9"}


def test_watch_events_carry_the_shape_and_an_error_its_whole_status() -> None:
    event = decode_pod_event(json.dumps({"type": "MODIFIED", "object": worker_pod()}))
    assert event["type"] == "MODIFIED"
    assert event["object"] == decode_pods(listed("PodList", worker_pod()))["items"][0]
    gone = {"kind": "Status", "code": 410, "message": "too old resource version"}
    assert decode_pod_event(json.dumps({"type": "ERROR", "object": gone})) == \
        {"type": "ERROR", "object": gone}
    bookmark = decode_node_event(json.dumps(
        {"type": "BOOKMARK", "object": {"kind": "Node",
                                        "metadata": {"resourceVersion": "99"}}}))
    assert bookmark["object"]["metadata"] == {"resourceVersion": "99"}
    node = decode_node_event(json.dumps({"type": "ADDED", "object": worker_node()}))
    assert slim_node(node["object"]) == slim_node(worker_node())
