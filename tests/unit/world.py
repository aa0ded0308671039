"""A small world for decision tests: a Trn2 group of UltraServers, its nodes and pods, and
the snapshot the decisions read. Each case writes only what differs from it."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from goodput_operator import names
from goodput_operator.api.ultraservergroup import UltraServerGroupSpec
from goodput_operator.decide import Snapshot
from goodput_operator.health.quarantine import Finding, quarantine_patch
from goodput_operator.resources import trainingjob as build
from goodput_operator.resources.fabric import Fabric
from goodput_operator.times import millis
from goodput_operator.topology.model import Fleet, GroupShape
from goodput_operator.topology.record import to_slices
from tests.unit.fleets import node

Obj = dict[str, Any]
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
GROUP = "trn2"
NEURON = "aws.amazon.com/neuron"
TRN2 = Fabric(NEURON, 16)  # what a Trn2 group's pods hold


def group_spec(**fields: Any) -> UltraServerGroupSpec:
    return UltraServerGroupSpec.model_validate({
        "nodeSelector": {"pool": "trn2"}, "nodesPerDomain": 4,
        "networkLevels": ["topology.k8s.aws/network-node-layer-1",
                          "topology.k8s.aws/network-node-layer-2"],
        "accelerator": {"resource": NEURON, "perNode": 16},
        "probes": {"schedule": ""}, **fields})


def nodes(domains: int = 2, **overrides: Obj) -> dict[str, Obj]:
    """us0-n0 .. us{domains-1}-n3, labelled as the group's members; OVERRIDES replace a
    node's status conditions or add metadata (see `not_ready`, `quarantined`)."""
    found = {}
    for d in range(domains):
        for s in range(4):
            name = f"us{d}-n{s}"
            body = node(name, f"us-{d}", "b0", labels={"pool": "trn2"})
            body["metadata"]["resourceVersion"] = "1"
            found[name] = _merge(body, overrides.get(name.replace("-", "_"), {}))
    return found


def _merge(body: Obj, patch: Obj) -> Obj:
    merged = copy.deepcopy(body)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def not_ready(since: float) -> Obj:
    return {"status": {"conditions": [{"type": "Ready", "status": "False",
                                       "lastTransitionTime": millis(since)}]}}


def quarantined(body: Obj, reason: str, at: float, by: str = "operator", owner: str = "") -> Obj:
    """BODY quarantined at AT (OWNER: the job whose reports asked for it: a hold)."""
    patch = quarantine_patch(body, Finding(reason, "seen", at, owner=owner), at, by)
    patch["metadata"].pop("resourceVersion")
    return _merge(body, patch)


def group_object(spec: UltraServerGroupSpec, status: Obj | None = None) -> Obj:
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
            "metadata": {"name": GROUP, "generation": 1, "uid": "g"},
            "spec": spec.model_dump(by_alias=True), "status": status or {}}


def job(name: str = "j", status: Obj | None = None, **spec: Any) -> Obj:
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "generation": 1, "creationTimestamp": millis(NOW - 30)},
            "spec": {"ultraServerGroup": GROUP, "workers": 2, "acceleratorsPerWorker": 16,
                     "template": {"spec": {"containers": [{"name": "t", "image": "i"}]}},
                     **spec},
            "status": status or {}}


def worker(owner: Obj, rank: int, restart: int = 0, node_name: str | None = None,
           phase: str = "Pending", ready: bool = False, code: int | None = None) -> Obj:
    """A worker pod of OWNER as the API returns it: gated until it has a node."""
    return as_returned(build.worker_pod(owner, rank, restart, TRN2), node_name, phase,
                       ready, code)


def as_returned(body: Obj, node_name: str | None = None, phase: str = "Pending",
                ready: bool = False, code: int | None = None) -> Obj:
    """A pod the operator built, as the API returns it once it is bound to NODE_NAME (if
    given) and in PHASE; CODE: its container's exit code."""
    body["metadata"]["resourceVersion"] = "1"
    if node_name:
        body["spec"]["schedulingGates"] = []
        body["spec"]["nodeName"] = node_name
    body["status"] = {"phase": phase,
                      "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if code is not None:
        body["status"]["containerStatuses"] = [
            {"state": {"terminated": {"exitCode": code, "finishedAt": millis(NOW - 5)}}}]
    return body


def placed(*ranks: str, domain: str = "us-0", at: float = NOW - 60) -> Obj:
    """A status.placement of ranks 0.. on these nodes."""
    return {"domains": [domain], "reason": "placed", "placedAt": millis(at),
            "workers": len(ranks), "slices": to_slices(
                {"rank": i, "node": n, "domain": domain} for i, n in enumerate(ranks))}


def world(node_bodies: dict[str, Obj] | None = None, jobs: Iterable[Obj] = (),
          pods: Iterable[Obj] = (), endpoints: Iterable[Obj] = (),
          spec: UltraServerGroupSpec | None = None, group_status: Obj | None = None,
          **fields: Any) -> Snapshot:
    """The snapshot: one group over NODE_BODIES (default: 2 healthy UltraServers), the
    jobs in the order given, their pods bound where they say; FIELDS: any other
    Snapshot field (clock, blamed, scaled, ...)."""
    spec = spec or group_spec()
    bodies = nodes() if node_bodies is None else node_bodies
    pods = list(pods)
    fleet = Fleet.from_objects(GroupShape.from_spec(spec), bodies.values(), pods)
    job_pods: dict[tuple[str, str], dict[str, Obj]] = {}
    endpoint_pods: dict[tuple[str, str], dict[str, Obj]] = {}
    for pod in pods:
        labels = pod["metadata"]["labels"]
        key = names.JOB_LABEL if names.JOB_LABEL in labels else names.ENDPOINT_LABEL
        index = job_pods if key == names.JOB_LABEL else endpoint_pods
        index.setdefault((pod["metadata"]["namespace"], labels[key]), {})[
            pod["metadata"]["name"]] = pod
    return Snapshot(**{
        "clock": NOW, "nodes": bodies, "groups": {GROUP: spec},
        "group_objects": {GROUP: group_object(spec, group_status)},
        "fleets": {GROUP: fleet}, "members": {GROUP: bodies}, "jobs": list(jobs),
        "job_pods": job_pods, "endpoints": list(endpoints), "endpoint_pods": endpoint_pods,
        "report_url": "https://reports:8081", **fields})


def conditions(status: Obj) -> dict[str, tuple[str, str]]:
    """A status's conditions as {type: (status, reason)}: what a case compares."""
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []}
