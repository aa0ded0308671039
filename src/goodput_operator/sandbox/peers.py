"""The real peers' side of a head-to-head (issue 46; ../shared/design/PEERS.md): the
objects Kueue v0.17's Topology Aware Scheduling needs to place gangs on the same fleet
the operator places TrainingJobs on, and a gang as TAS takes it (an Indexed Job).

Pure: objects from an UltraServerGroup's spec and a gang's shape, so that each peer is
given the same fleet, the same gangs and the same topology as the operator, and so that
what it is given is unit-tested. Fair play (PEERS.md): the peer at its defaults (TAS and
hot swap are on by default in v0.17; balanced and multi-layer placement are alpha gates,
off), every figure naming its version.

- `tas_objects`: a Topology whose levels are the group's network levels, then its domain
  label, then `kubernetes.io/hostname` (TAS requires hostname last to assign pods to
  nodes); a ResourceFlavor on the group's node selector naming that Topology; a
  ClusterQueue covering the accelerator resource with the whole fleet as its quota (TAS
  is compared on placement, not on quota); a LocalQueue in the namespace the gangs run in.
- `tas_gang`: N workers of A accelerators as an Indexed Job labelled with the queue, its
  pod template annotated with the level the gang must (`required`) or should
  (`preferred`) stay inside, as a TrainingJob's `topology.unit` and `policy` ask, and with
  slices (`podset-slice-required-topology` at the domain level, `podset-slice-size`).
"""

from __future__ import annotations

from typing import Any, Literal

from goodput_operator.api.ultraservergroup import UltraServerGroupSpec
from goodput_operator.sandbox.cluster import KEEP_RUNNING

Obj = dict[str, Any]
KUEUE = "kueue.x-k8s.io/v1beta2"
KUEUE_VERSION = "v0.17.0"  # the only one served here (PEERS.md); sandbox/kueue.py builds it
HOSTNAME = "kubernetes.io/hostname"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
Unit = Literal["node", "domain", "block"]


def tas_levels(spec: UltraServerGroupSpec) -> list[str]:
    """The group's topology as TAS levels, outermost first, hostname last."""
    return [*spec.network_levels, spec.domain_key, HOSTNAME]


def tas_objects(name: str, spec: UltraServerGroupSpec, nodes: int, namespace: str
                ) -> list[Obj]:
    """Topology, ResourceFlavor, ClusterQueue and LocalQueue (all named NAME) for the
    group of SPEC over NODES nodes, the gangs queued from NAMESPACE."""
    resource = spec.accelerator.resource
    return [
        {"apiVersion": KUEUE, "kind": "Topology", "metadata": {"name": name},
         "spec": {"levels": [{"nodeLabel": level} for level in tas_levels(spec)]}},
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name},
         "spec": {"nodeLabels": dict(spec.node_selector), "topologyName": name}},
        {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": [resource],
             "flavors": [{"name": name, "resources": [
                 {"name": resource,
                  "nominalQuota": nodes * spec.accelerator.per_node}]}]}]}},
        {"apiVersion": KUEUE, "kind": "LocalQueue",
         "metadata": {"name": name, "namespace": namespace},
         "spec": {"clusterQueue": name}},
    ]


def tas_level(spec: UltraServerGroupSpec, unit: Unit) -> str:
    """The TAS level a gang of UNIT stays inside: a node, a domain, or a network block
    (the innermost network level; the domain when the group names none)."""
    if unit == "node":
        return HOSTNAME
    if unit == "block" and spec.network_levels:
        return spec.network_levels[-1]
    return spec.domain_key


def tas_gang(name: str, namespace: str, queue: str, spec: UltraServerGroupSpec,
             workers: int, accelerators: int, unit: Unit = "domain",
             policy: Literal["required", "preferred"] = "required", slice_size: int = 1,
             image: str = "registry.k8s.io/pause:3.10", keep_running: bool = False) -> Obj:
    """WORKERS pods of ACCELERATORS as an Indexed Job that TAS admits whole: inside one
    UNIT as POLICY asks, in slices of SLICE_SIZE each inside one domain. KEEP_RUNNING: its
    pods hold their nodes in the sandbox until deleted (kwok finishes a Job's pods)."""
    annotations = {REQUIRED if policy == "required" else PREFERRED: tas_level(spec, unit)}
    if slice_size > 1:
        annotations |= {SLICE_REQUIRED: spec.domain_key, SLICE_SIZE: str(slice_size)}
    resources = {spec.accelerator.resource: str(accelerators)}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "completions": workers, "parallelism": workers, "completionMode": "Indexed",
            "suspend": True,  # Kueue unsuspends it once admitted
            "template": {
                "metadata": {"annotations": annotations,
                             "labels": {KEEP_RUNNING: "true"} if keep_running else {}},
                "spec": {"restartPolicy": "Never",
                         "nodeSelector": dict(spec.node_selector),
                         "containers": [{"name": "worker", "image": image,
                                         "resources": {"requests": resources,
                                                       "limits": resources}}]}}}}


def upstream_gang(name: str, namespace: str, spec: UltraServerGroupSpec, workers: int,
                  accelerators: int, unit: Unit = "domain",
                  image: str = "registry.k8s.io/pause:3.10") -> list[Obj]:
    """WORKERS pods of ACCELERATORS as one gang of Kubernetes' own gang scheduling
    (scheduling.k8s.io/v1alpha2, alpha in v1.36; the sandbox's `upstream_gang`): a PodGroup
    that the scheduler binds all or none (gang minCount WORKERS), inside one value of
    UNIT's label (its one topology constraint), and the pods that join it by
    `spec.schedulingGroup`. Plain pods: they hold their nodes until deleted."""
    resources = {spec.accelerator.resource: str(accelerators)}
    group = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
             "metadata": {"name": name, "namespace": namespace},
             "spec": {"schedulingPolicy": {"gang": {"minCount": workers}},
                      "schedulingConstraints": {"topology": [{"key": tas_level(spec, unit)}]}}}
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{name}-{i}", "namespace": namespace,
                          "labels": {KEEP_RUNNING: "true", "gang": name}},
             "spec": {"schedulingGroup": {"podGroupName": name},
                      "nodeSelector": dict(spec.node_selector),
                      "containers": [{"name": "worker", "image": image,
                                      "resources": {"requests": resources,
                                                    "limits": resources}}]}}
            for i in range(workers)]
    return [group, *pods]
