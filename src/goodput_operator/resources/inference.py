"""Pure builders for an InferenceEndpoint's children: replica-group pods (a leader and
workers, as LeaderWorkerSet shapes them), the Service over the leaders, and the headless
Service that gives every member a DNS name. Pods are born gated, like training workers,
and pinned once their whole group is placed inside one domain."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from goodput_operator import names
from goodput_operator.api.base import API_VERSION
from goodput_operator.api.inferenceendpoint import InferenceEndpointSpec, ServingRole
from goodput_operator.resources import claims
from goodput_operator.resources.claims import claim_accelerators
from goodput_operator.resources.computedomain import claim_channel, domain_name
from goodput_operator.resources.fabric import Fabric
from goodput_operator.resources.pods import child_name, template_metadata
from goodput_operator.resources.trainingjob import MANAGED_BY

Obj = dict[str, Any]


def revision(spec: Obj, role: str = "") -> str:
    """What a rollout replaces groups for: the pod template, model, port and shape (of
    ROLE, for a disaggregated endpoint)."""
    basis = {k: spec.get(k) for k in ("template", "model", "port", "replicaShape")}
    if role:
        own = (spec.get("roles") or {}).get(role) or {}
        basis |= {"template": role_template(spec, role), "replicaShape": own.get("replicaShape"),
                  "role": role}
    return hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:10]


def role_template(spec: Obj, role: str) -> Obj:
    """The pod template of ROLE ("" for the one role): its own, or spec.template."""
    own: Obj | None = ((spec.get("roles") or {}).get(role) or {}).get("template") if role \
        else None
    template: Obj = own or spec["template"]
    return template


def group_id(role: str, index: int) -> str:
    """How a group is named in its pods' names: `3`, or `prefill-3`."""
    return f"{role}-{index}" if role else str(index)


def owner_reference(ie: Obj) -> Obj:
    meta = ie["metadata"]
    return {"apiVersion": API_VERSION, "kind": "InferenceEndpoint", "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def members_service(name: str) -> str:
    return child_name(name, "-members", dns_label=True)


def member_hostname(name: str, index: int, member: int, role: str = "") -> str:
    return child_name(name, f"-{group_id(role, index)}-{member}", dns_label=True)


def pod_name(name: str, index: int, rev: str, member: int, role: str = "") -> str:
    return child_name(name, f"-{group_id(role, index)}-{rev[:5]}-{member}")


def service_name(name: str) -> str:
    return child_name(name, dns_label=True)


def selector(name: str) -> dict[str, str]:
    return {names.ENDPOINT_LABEL: name}


def entry(spec: InferenceEndpointSpec) -> dict[str, str]:
    """The pods requests enter at: every group's leader (with roles, the decode groups')."""
    return {names.ROLE_LABEL: "leader",
            **({names.SERVING_ROLE_LABEL: "decode"} if spec.roles is not None else {})}


def leader_selector(name: str, spec: InferenceEndpointSpec) -> str:
    return ",".join(f"{k}={v}" for k, v in {**selector(name), **entry(spec)}.items())


def service(ie: Obj, spec: InferenceEndpointSpec) -> Obj:
    """The endpoint: a ClusterIP Service over the leaders of every (decode) replica group."""
    name = ie["metadata"]["name"]
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": service_name(name), "namespace": ie["metadata"]["namespace"],
                         "labels": {**selector(name), **MANAGED_BY},
                         "ownerReferences": [owner_reference(ie)]},
            "spec": {"selector": {**selector(name), **entry(spec)},
                     "ports": [{"name": "http", "port": spec.port, "targetPort": spec.port}]}}


def headless(ie: Obj) -> Obj:
    """Stable DNS names for every member: <name>-<group>-<member>.<name>-members.<ns>.svc."""
    name = ie["metadata"]["name"]
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": members_service(name), "namespace": ie["metadata"]["namespace"],
                         "labels": {**selector(name), **MANAGED_BY},
                         "ownerReferences": [owner_reference(ie)]},
            "spec": {"clusterIP": "None", "selector": selector(name),
                     "publishNotReadyAddresses": True}}


def group_pods(ie: Obj, spec: InferenceEndpointSpec, index: int, rev: str,
               fabric: Fabric, serving: ServingRole | None = None,
               members: int | None = None) -> list[Obj]:
    """Replica group INDEX at revision REV of the role SERVING (default: the one role):
    member 0 is the leader. Each member holds its accelerators (by extended resource or DRA
    claim, as the group asks: FABRIC) and its share of EFA, with the fabric's settings; a
    multi-node replica on NVLink joins its own ComputeDomain (`<endpoint>-r<index>-imex`,
    or `<endpoint>-<role>-r<index>-imex`, kept across rollouts and restarts). MEMBERS: only
    the first so many (the leader alone, for what a group's pods ask of a node)."""
    meta = ie["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    serving = serving or spec.serving_roles()[0]
    own = serving.name
    size = serving.shape.workers
    leader = (f"{member_hostname(name, index, 0, own)}.{members_service(name)}."
              f"{namespace}.svc")
    # a multi-region endpoint's replica: its pods say which endpoint they serve (a
    # regional Service selects them all by it)
    regional = {k: v for k, v in (ie["metadata"].get("labels") or {}).items()
                if k == names.GLOBAL_ENDPOINT_LABEL}
    pods = []
    for member in range(size if members is None else min(members, size)):
        template = copy.deepcopy(role_template(ie["spec"], own))
        pod_spec: Obj = template.get("spec", {})
        role = "leader" if member == 0 else "worker"
        labels = {**template_metadata(template, "labels"), **selector(name),
                  names.REPLICA_LABEL: str(index), names.MEMBER_LABEL: str(member),
                  names.REVISION_LABEL: rev, names.ROLE_LABEL: role, **MANAGED_BY,
                  **({names.SERVING_ROLE_LABEL: own} if own else {}), **regional}
        env = {names.ENV_ENDPOINT: f"{namespace}/{name}", names.ENV_ROLE: role,
               **({names.ENV_SERVING_ROLE: own} if own else {}),
               names.ENV_REPLICA: str(index), names.ENV_GROUP_SIZE: str(size),
               names.ENV_WORKER_INDEX: str(member), names.ENV_LEADER_ADDRESS: leader,
               names.ENV_MODEL_NAME: spec.model.name,
               names.ENV_MODEL_SOURCE: spec.model.source or "",
               names.ENV_PORT: str(spec.port),
               # LeaderWorkerSet's names, so servers written for LWS run unchanged
               "LWS_LEADER_ADDRESS": leader, "LWS_GROUP_SIZE": str(size),
               "LWS_WORKER_INDEX": str(member)}
        accelerators = serving.shape.accelerators_per_worker
        fabric.fit_out(pod_spec["containers"], [{"name": k, "value": v} for k, v in env.items()],
                       "server", accelerators)
        if fabric.imex and size > 1 and accelerators:
            claim_channel(pod_spec, domain_name(f"{name}-{own}-r{index}" if own
                                                else f"{name}-r{index}"))
        pod_spec["restartPolicy"] = "Never"  # a failed member restarts its whole group
        pod_spec["hostname"] = member_hostname(name, index, member, own)
        pod_spec["subdomain"] = members_service(name)
        pod_spec["schedulingGates"] = [{"name": names.PLACEMENT_GATE}]
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": pod_name(name, index, rev, member, own),
                            "namespace": namespace, "labels": labels,
                            "annotations": template_metadata(template, "annotations"),
                            "ownerReferences": [owner_reference(ie)]},
               "spec": pod_spec}
        if fabric.device_class and accelerators:
            claim_accelerators(pod, claim_base(name), accelerators)
        pods.append(pod)
    return pods


def claim_base(name: str) -> str:
    """What the endpoint's claim templates are named from: not its bare name, which a
    TrainingJob of the same name names its own from (resources.claims.template_name)."""
    return f"{name}-serving"


def claim_sources(ie: Obj, pods: list[Obj], device_class: str | None) -> list[Obj]:
    """What the replicas' claims are made from, created before them (resources.claims)."""
    return claims.claim_sources(ie, pods, device_class,
                                {**selector(ie["metadata"]["name"]), **MANAGED_BY},
                                owner_reference(ie), claim_base(ie["metadata"]["name"]))


SCRAPE = "prometheus.io/scrape"  # the pod annotations Prometheus setups read
SCRAPE_PORT, SCRAPE_PATH = "prometheus.io/port", "prometheus.io/path"


def scrape_targets(endpoints: Iterable[Obj], pods: Mapping[tuple[str, str], Mapping[str, Obj]]
                   ) -> list[Obj]:
    """Prometheus HTTP service discovery (`http_sd_configs`) for the serving pods: every
    running pod with an IP of an endpoint, annotated `prometheus.io/scrape: "true"`, at
    its `prometheus.io/port` (else the endpoint's port), labelled as the autoscaler's
    default queries select: namespace, endpoint, role (prefill/decode) and pod."""
    groups = []
    for ie in endpoints:
        meta = ie["metadata"]
        key = (meta["namespace"], meta["name"])
        port = (ie.get("spec") or {}).get("port", 8000)
        for name, pod in sorted((pods.get(key) or {}).items()):
            annotations = pod["metadata"].get("annotations") or {}
            labels = pod["metadata"].get("labels") or {}
            status = pod.get("status") or {}
            if annotations.get(SCRAPE) != "true" or status.get("phase") != "Running" or \
                    not status.get("podIP") or labels.get(names.ENDPOINT_LABEL) != key[1]:
                continue
            target_port = annotations.get(SCRAPE_PORT) or port
            groups.append({"targets": [f"{status['podIP']}:{target_port}"], "labels": {
                "namespace": key[0], "endpoint": key[1], "pod": name,
                **({"role": labels[names.SERVING_ROLE_LABEL]}
                   if names.SERVING_ROLE_LABEL in labels else {}),
                **({"__metrics_path__": annotations[SCRAPE_PATH]}
                   if annotations.get(SCRAPE_PATH) else {})}})
    return groups
