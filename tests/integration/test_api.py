"""The three CRDs behave like Kubernetes APIs: they apply, explain, print, default, and
reject bad input at admission with a message that names the field."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from goodput_operator import names
from tests.conftest import Cluster, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
# examples/fleets holds sandbox input (kind SimulatedFleet), examples/peers other systems'
# manifests: not API objects of ours.
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("*.yaml")
                  if "fleets" not in p.parts and "peers" not in p.parts)

Doc = dict[str, Any]


def apply(cluster: Cluster, doc: Doc, namespace: str | None) -> Any:
    args = ["apply", "--server-side", "-f", "-"]
    if namespace and doc["kind"] != "UltraServerGroup":
        args += ["-n", namespace]
    return cluster.kubectl(*args, check=False, input_text=json.dumps(doc))


def exists(cluster: Cluster, doc: Doc, namespace: str) -> bool:
    args = ["get", f"{doc['kind'].lower()}.goodput.dev", doc["metadata"]["name"]]
    if doc["kind"] != "UltraServerGroup":
        args += ["-n", namespace]
    proc = cluster.kubectl(*args, check=False)
    if proc.returncode == 0:
        return True
    assert "NotFound" in proc.stderr, proc.stderr
    return False


def test_every_crd_and_example_applies(crds: Cluster, namespace: str) -> None:
    assert len(EXAMPLES) >= 9
    for path in EXAMPLES:
        doc = yaml.safe_load(path.read_text())
        doc["metadata"]["name"] = f"{doc['metadata']['name']}-{namespace}"[:63].rstrip("-")
        result = apply(crds, doc, namespace)
        assert result.returncode == 0, f"{path}: {result.stderr}"
        assert exists(crds, doc, namespace)
        if doc["kind"] == "UltraServerGroup":
            crds.kubectl("delete", "usg", doc["metadata"]["name"])


def explain(cluster: Cluster, field: str) -> str:
    """`kubectl explain FIELD`, once the API server publishes the CRD's schema (it does so
    a moment after the CRD is established or changed)."""
    return str(wait_for(lambda: (proc := cluster.kubectl("explain", field, check=False))
                        .returncode == 0 and proc.stdout, timeout=30,
                        what=f"kubectl explain {field}"))


def test_explain_shows_field_docs(crds: Cluster) -> None:
    out = explain(crds, "trainingjob.spec.topology")
    assert "Placement unit, policy and rank order." in out
    assert "enum: node, domain, block" in out
    assert "rankOrder" in out and "physical neighbours" in out
    usg = explain(crds, "usg.spec.domainLabel")
    assert "nvidia.com/gpu.clique (nvlink: a GB200 NVL72 domain)" in " ".join(usg.split())


def test_get_shows_printer_columns(crds: Cluster, namespace: str) -> None:
    for path in EXAMPLES:
        doc = yaml.safe_load(path.read_text())
        if doc["kind"] != "UltraServerGroup":
            apply(crds, doc, namespace)
    jobs = crds.kubectl("get", "tj", "-n", namespace).stdout.splitlines()
    assert jobs[0].split() == ["NAME", "PHASE", "READY", "WORKERS", "ACCELERATORS", "DOMAINS",
                               "RESTARTS", "AGE"]
    endpoints = crds.kubectl("get", "ie", "-n", namespace).stdout.splitlines()
    assert endpoints[0].split() == ["NAME", "MODEL", "READY", "DESIRED", "PODS/REPLICA", "AGE"]
    assert any(line.split()[:2] == ["llama-405b", "llama-3.1-405b-instruct"]
               for line in endpoints[1:])
    group = minimal_group(f"columns-{namespace}")
    apply(crds, group, None)
    try:
        groups = crds.kubectl("get", "usg", group["metadata"]["name"]).stdout.splitlines()
        assert groups[0].split() == ["NAME", "HEALTH", "DOMAINS", "READY", "NODES",
                                     "ACCELERATORS", "FREE", "AGE"]
    finally:
        crds.kubectl("delete", "usg", group["metadata"]["name"])
    together = crds.kubectl("get", "goodput", "-n", namespace).stdout
    assert "trainingjob.goodput.dev/llama-8b-pretrain" in together
    assert "inferenceendpoint.goodput.dev/llama-405b" in together


def minimal_job(name: str = "job") -> Doc:
    return {
        "apiVersion": "goodput.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "ultraServerGroup": "trn2-pool", "workers": 4, "acceleratorsPerWorker": 16,
            "template": {"spec": {"containers": [{"name": "t", "image": "trainer:1"}]}},
        },
    }


def minimal_group(name: str = "group") -> Doc:
    return {
        "apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"node.kubernetes.io/instance-type": "trn2u.48xlarge"},
            "accelerator": {"perNode": 16}, "nodesPerDomain": 4,
        },
    }


def minimal_endpoint(name: str = "endpoint") -> Doc:
    return {
        "apiVersion": "goodput.dev/v1alpha1", "kind": "InferenceEndpoint",
        "metadata": {"name": name},
        "spec": {
            "ultraServerGroup": "nvl72-pool", "model": {"name": "llama"},
            "replicaShape": {"workers": 2, "acceleratorsPerWorker": 4},
            "template": {"spec": {"containers": [{"name": "s", "image": "server:1"}]}},
        },
    }


def test_server_side_defaults_appear_as_documented(crds: Cluster, namespace: str) -> None:
    apply(crds, minimal_job("defaults"), namespace)
    spec = json.loads(crds.kubectl("get", "tj", "defaults", "-n", namespace, "-o", "json")
                      .stdout)["spec"]
    assert spec["launcher"] == {"type": "torchrun", "port": 29500}
    assert spec["topology"] == {"unit": "domain", "policy": "required", "rankOrder": "fabric",
                                "balance": False}
    assert spec["checkpoint"] == {"verify": False}
    assert spec["failurePolicy"]["maxRestarts"] == 10
    assert spec["failurePolicy"]["nodeReplacement"] == "any"
    assert spec["failurePolicy"]["backoff"] == {"initialSeconds": 10, "maxSeconds": 600}
    assert spec["priority"] == 0 and spec["suspend"] is False
    assert "elastic" not in spec and "ttlSecondsAfterFinished" not in spec

    group = minimal_group(f"defaults-{namespace}")
    apply(crds, group, None)
    try:
        usg = json.loads(crds.kubectl("get", "usg", group["metadata"]["name"], "-o", "json")
                         .stdout)["spec"]
        assert "domainLabel" not in usg               # the interconnect's (GroupShape)
        assert usg["accelerator"] == {"resource": "aws.amazon.com/neuron", "perNode": 16,
                                      "efaPerNode": 0, "rdmaPerPod": 1,
                                      "requestStyle": "ExtendedResource"}
        assert usg["computeDomains"] is True
        assert usg["interconnect"] == "neuronlink"
        assert usg["quarantine"]["notReadyGraceSeconds"] == 5
        assert usg["quarantine"]["maxUnavailable"] == "20%"
        assert usg["quarantine"]["readyConditions"][0] == "AcceleratedHardwareReady"
        assert usg["quarantine"]["deviceTaintEffects"] == ["NoExecute"]
        assert usg["quarantine"]["healthLabels"][0]["key"] == \
            "sagemaker.amazonaws.com/node-health-status"
        assert usg["spares"] == {"perDomain": 0, "perGroup": 0}
        assert usg["noticeDeadlineSeconds"] == {
            "spotInterruption": 120, "rebalanceRecommendation": 600,
            "scheduledMaintenance": 600, "autoScalingTermination": 600,
            "karpenterDisruption": 600, "drain": 600}
    finally:
        crds.kubectl("delete", "usg", group["metadata"]["name"])

    endpoint = minimal_endpoint("defaults")
    endpoint["spec"]["scaling"] = {"maxReplicas": 4, "metrics": [{"type": "QueueDepth",
                                                                  "target": 8}]}
    assert apply(crds, endpoint, namespace).returncode == 0
    ie = json.loads(crds.kubectl("get", "ie", "defaults", "-n", namespace, "-o", "json")
                    .stdout)["spec"]
    assert ie["scaling"]["minReplicas"] == 1
    assert ie["scaling"]["tolerance"] == 0.1
    assert ie["scaling"]["scaleUp"]["stabilizationSeconds"] == 0
    assert ie["scaling"]["scaleDown"]["stabilizationSeconds"] == 300
    assert ie["rollout"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert ie["port"] == 8000


Mutation = Callable[[Doc], None]


def put(path: str, value: Any) -> Mutation:
    """Set a dotted path (list indexes as numbers) in the object."""
    def mutate(doc: Doc) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        node[int(last) if last.isdigit() else last] = value
    return mutate


def drop(path: str) -> Mutation:
    def mutate(doc: Doc) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        del node[last]
    return mutate


def disaggregated_endpoint(name: str = "endpoint") -> Doc:
    """Prefill and decode pools (spec.roles) instead of one replica shape."""
    doc = minimal_endpoint(name)
    del doc["spec"]["replicaShape"]
    doc["spec"]["roles"] = {
        "decode": {"replicaShape": {"workers": 2, "acceleratorsPerWorker": 4}},
        "prefill": {"replicaShape": {"workers": 1, "acceleratorsPerWorker": 4},
                    "replicas": 2}}
    return doc


J, G, E, ER = minimal_job, minimal_group, minimal_endpoint, disaggregated_endpoint
SCALED = {"maxReplicas": 4, "metrics": [{"type": "QueueDepth", "target": 8}]}
REGIONS = {"regions": [{"name": "east", "queue": "east"}, {"name": "west", "queue": "west"}]}
BAD: list[tuple[str, Callable[[str], Doc], list[Mutation], list[str]]] = [
    ("zero workers", J, [put("spec.workers", 0)],
     ["spec.workers", "greater than or equal to 1"]),
    ("negative accelerators", J, [put("spec.acceleratorsPerWorker", -1)],
     ["spec.acceleratorsPerWorker", "greater than or equal to 1"]),
    ("no template", J, [drop("spec.template")], ["spec.template: Required value"]),
    ("no containers", J, [put("spec.template.spec.containers", [])],
     ["spec.template.spec.containers", "at least 1"]),
    ("container without image", J, [drop("spec.template.spec.containers.0.image")],
     ["spec.template.spec.containers[0].image: Required value"]),
    ("unknown topology unit", J, [put("spec.topology", {"unit": "rack"})],
     ['spec.topology.unit: Unsupported value: "rack"', '"node", "domain", "block"']),
    ("unknown topology policy", J, [put("spec.topology", {"policy": "sometimes"})],
     ["spec.topology.policy: Unsupported value"]),
    ("unknown launcher", J, [put("spec.launcher", {"type": "deepspeed"})],
     ['spec.launcher.type: Unsupported value: "deepspeed"']),
    ("port out of range", J, [put("spec.launcher", {"port": 70000})],
     ["spec.launcher.port", "less than or equal to 65534"]),
    ("elastic minimum above the gang", J,
     [put("spec.elastic", {"minWorkers": 8}), put("spec.workers", 4)],
     ["spec.workers", "workers must be at least elastic.minWorkers"]),
    ("an elastic maximum (removed: the gang never grows past spec.workers)", J,
     [put("spec.elastic", {"minWorkers": 2, "maxWorkers": 8})],
     [".spec.elastic.maxWorkers: field not declared in schema"]),
    ("a gang that is not whole slices", J,
     [put("spec.workers", 10), put("spec.topology", {"slice": {"size": 4}})],
     ["spec.workers", "workers must be a multiple of topology.slice.size"]),
    ("slices with ranks in name order", J,
     [put("spec.workers", 8), put("spec.topology", {"slice": {"size": 4},
                                                    "rankOrder": "index"})],
     ["spec.topology.rankOrder", "topology.slice needs rankOrder fabric"]),
    ("an elastic step that breaks slices", J,
     [put("spec.workers", 8), put("spec.topology", {"slice": {"size": 4}}),
      put("spec.elastic", {"minWorkers": 4, "step": 2})],
     ["spec.elastic", "multiples of topology.slice.size"]),
    ("a slice unit other than domain", J,
     [put("spec.topology", {"slice": {"size": 4, "unit": "block"}})],
     ['spec.topology.slice.unit: Unsupported value: "block"']),
    ("two pod sets of one name", J,
     [put("spec.podSets", [{"name": "leader"}, {"name": "leader", "replicas": 2}])],
     ['.spec.podSets: duplicate entries for key [name="leader"]']),
    ("a pod set name that is no DNS label", J,
     [put("spec.podSets", [{"name": "Leader_0"}])],
     ["spec.podSets[0].name", "should match"]),
    ("a pod set named as the workers' own", J,
     [put("spec.podSets", [{"name": "workers"}])],
     ["spec.podSets[0].name", "'workers' is the workers' own pod set"]),
    ("a pod set nearer than a domain", J,
     [put("spec.podSets", [{"name": "leader", "near": "node"}])],
     ['spec.podSets[0].near: Unsupported value: "node"']),
    ("verified checkpoints without the votes that verify them", J,
     [put("spec.checkpoint", {"dir": "/fsx/x", "verify": True})],
     ["spec.checkpoint.verify", "needs sdc.crossReplicaCheck"]),
    ("no group (a node selector narrows a group, it is none)", J,
     [drop("spec.ultraServerGroup"), put("spec.nodeSelector", {"pool": "trn2"})],
     ["spec.ultraServerGroup: Required value"]),
    ("unknown exit-code action", J,
     [put("spec.failurePolicy", {"exitCodes": [{"codes": [1], "action": "retry"}]})],
     ['spec.failurePolicy.exitCodes[0].action: Unsupported value: "retry"']),
    ("exit code above 255", J,
     [put("spec.failurePolicy", {"exitCodes": [{"codes": [300], "action": "fail"}]})],
     ["spec.failurePolicy.exitCodes[0].codes[0]", "less than or equal to 255"]),
    ("exit-code rule without codes", J,
     [put("spec.failurePolicy", {"exitCodes": [{"codes": [], "action": "fail"}]})],
     ["spec.failurePolicy.exitCodes[0].codes", "at least 1"]),
    ("backoff initial above max", J,
     [put("spec.failurePolicy", {"backoff": {"initialSeconds": 900, "maxSeconds": 60}})],
     ["spec.failurePolicy.backoff.initialSeconds",
      "backoff.initialSeconds must be <= backoff.maxSeconds"]),
    ("misspelt field", J, [put("spec.gpus", 8)], [".spec.gpus: field not declared in schema"]),
    ("group name not DNS", J, [put("spec.ultraServerGroup", "Trn2_Pool")],
     ["spec.ultraServerGroup", "should match"]),
    ("empty checkpoint dir", J, [put("spec.checkpoint", {"dir": ""})],
     ["spec.checkpoint.dir", "at least 1 chars long"]),
    ("object store credentials for a shared filesystem", J,
     [put("spec.checkpoint", {"dir": "/fsx/x", "credentialsSecret": "store"})],
     ["spec.checkpoint.credentialsSecret", "set dir to s3://bucket/prefix"]),
    ("a shared-filesystem tier without an object store", J,
     [put("spec.checkpoint", {"dir": "/fsx/x", "sharedDir": "/fsx/y"})],
     ["spec.checkpoint.sharedDir", "set dir to s3://bucket/prefix"]),
    ("a relative shared-filesystem tier", J,
     [put("spec.checkpoint", {"dir": "s3://b/x", "sharedDir": "fsx/y"})],
     ["spec.checkpoint.sharedDir", "should match"]),
    ("a jax gang of more hosts than a slice may have, unsliced", J,
     [put("spec.launcher", {"type": "jax"}), put("spec.workers", 2048)],
     ["spec.launcher", "launcher jax lists a slice's hosts in each of its pods: at most 1024"]),
    ("loss spike factor not above 1", J, [put("spec.sdc", {"lossSpikeFactor": 1})],
     ["spec.sdc.lossSpikeFactor", "greater than 1"]),
    ("zero nodes per domain", G, [put("spec.nodesPerDomain", 0)],
     ["spec.nodesPerDomain", "greater than or equal to 1"]),
    ("spares fill the domain", G, [put("spec.spares", {"perDomain": 4})],
     ["spec.spares.perDomain", "spares.perDomain must be less than nodesPerDomain"]),
    ("unknown interconnect", G, [put("spec.interconnect", "myrinet")],
     ['spec.interconnect: Unsupported value: "myrinet"']),
    ("a spare host inside a TPU slice", G,
     [put("spec.interconnect", "ici"), put("spec.spares", {"perDomain": 1})],
     ["spec.spares.perDomain", "a TPU slice (interconnect ici) runs whole and has no spare"]),
    ("storm guard over 100%", G, [put("spec.quarantine", {"maxUnavailable": "120%"})],
     ["spec.quarantine.maxUnavailable", "must be a count >= 0 or a percentage"]),
    ("negative notice deadline", G, [put("spec.noticeDeadlineSeconds", {"drain": -1})],
     ["spec.noticeDeadlineSeconds.drain", "greater than or equal to 0"]),
    ("unknown kind of notice", G, [put("spec.noticeDeadlineSeconds", {"reboot": 60})],
     [".spec.noticeDeadlineSeconds.reboot: field not declared in schema"]),
    ("slot label missing", G, [put("spec.slotOrder", {"by": "label"})],
     ["spec.slotOrder.label", "slotOrder.label is required when slotOrder.by is 'label'"]),
    ("empty node selector", G, [put("spec.nodeSelector", {})],
     ["spec.nodeSelector", "at least 1"]),
    ("a node selector on a label the operator writes", G,
     [put("spec.nodeSelector", {names.SLOT_LABEL: "0"})],
     ["spec.nodeSelector", "nodeSelector may not select on goodput.dev/group"]),
    ("a device class without DRA", G, [put("spec.accelerator", {
        "perNode": 16, "deviceClassName": "neuron.aws.com"})],
     ["spec.accelerator.deviceClassName", "requestStyle ResourceClaim only"]),
    ("an unknown request style", G, [put("spec.accelerator", {
        "perNode": 16, "requestStyle": "Magic"})], ["spec.accelerator.requestStyle"]),
    ("a device taint effect nodes have but devices do not", G, [put(
        "spec.quarantine", {"deviceTaintEffects": ["PreferNoSchedule"]})],
     ["spec.quarantine.deviceTaintEffects"]),
    ("accelerators per node missing", G, [put("spec.accelerator", {})],
     ["spec.accelerator.perNode: Required value"]),
    ("probe schedule not cron", G, [put("spec.probes", {"schedule": "hourly"})],
     ["spec.probes.schedule", "should match"]),
    ("scaling min above max", E,
     [put("spec.scaling", {"minReplicas": 5, "maxReplicas": 2,
                           "metrics": [{"type": "QueueDepth", "target": 8}]})],
     ["spec.scaling.minReplicas", "scaling.minReplicas must be <= scaling.maxReplicas"]),
    ("scale to zero without idle time", E,
     [put("spec.scaling", {"minReplicas": 0, "maxReplicas": 2,
                           "metrics": [{"type": "QueueDepth", "target": 8}]})],
     ["spec.scaling.minReplicas", "needs scaling.scaleToZeroAfterSeconds"]),
    ("PromQL metric without query", E,
     [put("spec.scaling", {"maxReplicas": 2, "metrics": [{"type": "PromQL", "target": 1}]})],
     ["spec.scaling.metrics[0].query", "query is required when type is PromQL"]),
    ("unknown metric", E,
     [put("spec.scaling", {"maxReplicas": 2, "metrics": [{"type": "CPU", "target": 1}]})],
     ['spec.scaling.metrics[0].type: Unsupported value: "CPU"']),
    ("KV-cache target above the whole cache", E,
     [put("spec.scaling", {"maxReplicas": 2,
                           "metrics": [{"type": "KVCacheUtilization", "target": 80}]})],
     ["spec.scaling.metrics[0].target", "a fraction of the cache: at most 1"]),
    ("unknown engine's metric names", E,
     [put("spec.scaling", {"maxReplicas": 2, "metricNames": "TGI",
                           "metrics": [{"type": "QueueDepth", "target": 8}]})],
     ['spec.scaling.metricNames: Unsupported value: "TGI"']),
    ("rollout that cannot progress", E,
     [put("spec.rollout", {"maxSurge": 0, "maxUnavailable": 0})],
     ["spec.rollout.maxSurge", "cannot both be 0"]),
    ("zero pods per replica", E, [put("spec.replicaShape.workers", 0)],
     ["spec.replicaShape.workers", "greater than or equal to 1"]),
    ("replicas outside scaling bounds", E,
     [put("spec.replicas", 9),
      put("spec.scaling", {"maxReplicas": 3, "metrics": [{"type": "QueueDepth", "target": 8}]})],
     ["spec.replicas", "replicas must lie within scaling.minReplicas..scaling.maxReplicas"]),
    ("tolerance of 1 or more", E,
     [put("spec.scaling", {"maxReplicas": 2, "tolerance": 1.5,
                           "metrics": [{"type": "QueueDepth", "target": 8}]})],
     ["spec.scaling.tolerance", "less than 1"]),
    ("prometheus url not http", E,
     [put("spec.scaling", {"maxReplicas": 2, "prometheusUrl": "ftp://prom",
                           "metrics": [{"type": "QueueDepth", "target": 8}]})],
     ["spec.scaling.prometheusUrl", "should match"]),
    ("no model", E, [drop("spec.model")], ["spec.model: Required value"]),
    ("roles beside a replica shape", ER,
     [put("spec.replicaShape", {"workers": 1, "acceleratorsPerWorker": 4})],
     ["spec.replicaShape", "set exactly one of replicaShape (one role) and roles"]),
    ("neither a replica shape nor roles", E, [drop("spec.replicaShape")],
     ["spec.replicaShape", "set exactly one of replicaShape (one role) and roles"]),
    ("roles with the endpoint's own scaling", ER, [put("spec.scaling", SCALED)],
     ["spec.roles", "with roles, each role has its own size"]),
    ("a role that scales to zero", ER,
     [put("spec.roles.prefill.scaling", {**SCALED, "minReplicas": 0,
                                          "scaleToZeroAfterSeconds": 60})],
     ["spec.roles.prefill.scaling.minReplicas", "must be at least 1"]),
    ("a role's replicas outside its scaling bounds", ER,
     [put("spec.roles.prefill.scaling", SCALED), put("spec.roles.prefill.replicas", 9)],
     ["spec.roles.prefill.replicas", "roles.<role>.replicas must lie within"]),
    ("prefill per decode, min above max", ER,
     [put("spec.roles.prefillPerDecode", {"min": 3, "max": 1})],
     ["spec.roles.prefillPerDecode.min", "prefillPerDecode.min must be <="]),
    ("a RequestRate metric with a scale-down window shorter than its rate's", E,
     [put("spec.scaling", {**SCALED, "metrics": [{"type": "RequestRate", "target": 4}],
                           "scaleDown": {"stabilizationSeconds": 20}})],
     ["spec.scaling.scaleDown.stabilizationSeconds", "at least 60 with a RequestRate"]),
    ("a standby for one role", ER,
     [put("spec.roles.prefill.scaling", {**SCALED, "standbyDomains": 1})],
     ["spec.roles.prefill.scaling.standbyDomains", "for single-role endpoints"]),
    ("more standby domains than allowed", E,
     [put("spec.scaling", {**SCALED, "standbyDomains": 65})],
     ["spec.scaling.standbyDomains", "less than or equal to 64"]),
    ("an unknown unit affinity", ER, [put("spec.roles.affinity", "Rack")],
     ['spec.roles.affinity: Unsupported value: "Rack"']),
    ("roles of 14,400 pods", ER, [put("spec.roles.decode.replicaShape.workers", 72),
                                  put("spec.roles.decode.replicas", 200)],
     ["spec.replicaShape.workers", "(for roles, both roles together)"]),
    # a workload's name labels its pods; a template may not take placement away from the
    # operator, nor speak for it in goodput.dev/ labels (issue 16)
    ("a gang larger than any fleet", J, [put("spec.workers", 100_000)],
     ["spec.workers", "less than or equal to 8192"]),
    ("an endpoint of 14,400 pods", E, [put("spec.replicas", 200),
                                       put("spec.replicaShape.workers", 72)],
     ["spec.replicaShape.workers", "must be at most 8192 pods"]),
    ("job name too long to label its pods", J, [put("metadata.name", "j" * 64)],
     ["metadata.name: at most 63 characters"]),
    ("endpoint name too long to label its pods", E, [put("metadata.name", "e" * 64)],
     ["metadata.name: at most 63 characters"]),
    ("template pins a node", J, [put("spec.template.spec.nodeName", "us0-n0")],
     ["spec.template.spec.nodeName", "the operator chooses each worker's node"]),
    ("template brings scheduling gates", E,
     [put("spec.template.spec.schedulingGates", [{"name": "example.com/hold"}])],
     ["spec.template.spec.schedulingGates", "the operator gates workers"]),
    ("template requires a hostname", J, [put("spec.template.spec.affinity", {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                   "values": ["us0-n0"]}]}]}}})],
     ["spec.template.spec.affinity.nodeAffinity", "kubernetes.io/hostname would fight"]),
    ("template selects nodes by field", J, [put("spec.template.spec.affinity", {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                    "values": ["us0-n0"]}]}]}}})],
     ["matchFields selects nodes by name"]),
    ("template forges a rank label", J,
     [put("spec.template.metadata.labels", {names.RANK_LABEL: "0"})],
     ["spec.template.metadata.labels", "goodput.dev/ are set by the operator only"]),
    ("an unknown manager", J, [put("spec.managedBy", "example.com/batch")],
     ['spec.managedBy: Unsupported value: "example.com/batch"']),
    ("a multi-region endpoint of two roles", ER, [put("spec.multiRegion", REGIONS)],
     ["spec.multiRegion", "serves one role"]),
    ("multi-region scaling on the replicas' own metrics", E,
     [put("spec.multiRegion", REGIONS), put("spec.scaling", SCALED)],
     ["spec.scaling.metrics", "needs a query"]),
    ("a Weighted split with no weight", E, [put("spec.multiRegion", {
        "split": "Weighted", "regions": [{"name": "east", "queue": "east", "weight": 0}]})],
     ["spec.multiRegion.regions", "a weight above 0"]),
    ("two regions of one name", E, [put("spec.multiRegion", {"regions": [
        {"name": "east", "queue": "a"}, {"name": "east", "queue": "b"}]})],
     ["spec.multiRegion.regions: duplicate entries for key [name=\"east\"]"]),
    ("a multi-region endpoint MultiKueue would send away", E,
     [put("spec.multiRegion", REGIONS), put("spec.managedBy", "kueue.x-k8s.io/multikueue")],
     ["spec.multiRegion", "cannot itself be managedBy MultiKueue"]),
    ("more SDC shards than workers", J, [put("spec.workers", 2), put("spec.sdc.shards", 4)],
     ["spec.sdc.shards", "sdc.shards must be <= workers"]),
    ("a restart loop with no backoff", J, [put("spec.failurePolicy", {
        "maxRestarts": 10000, "backoff": {"initialSeconds": 0, "maxSeconds": 0}})],
     ["spec.failurePolicy.backoff.initialSeconds", "at least 1 when maxRestarts"]),
    ("a launcher port with no port after it", J, [put("spec.launcher.port", 65535)],
     ["spec.launcher.port", "less than or equal to 65534"]),
    ("template forges a node annotation", E,
     [put("spec.template.metadata.annotations", {"x.goodput.dev/node": "us0-n0"})],
     ["spec.template.metadata.annotations", "goodput.dev/ are set by the operator only"]),
]


@pytest.mark.parametrize(("case", "make", "mutations", "expected"), BAD,
                         ids=[case for case, *_ in BAD])
def test_bad_resource_is_rejected_naming_the_field(
        crds: Cluster, namespace: str, case: str, make: Callable[[str], Doc],
        mutations: list[Mutation], expected: list[str]) -> None:
    doc = make(f"bad-{namespace}"[:60])
    for mutate in mutations:
        mutate(doc)
    result = apply(crds, doc, namespace)
    assert result.returncode != 0, f"{case}: accepted"
    for fragment in expected:
        assert fragment in result.stderr, f"{case}: {fragment!r} not in {result.stderr!r}"
    assert not exists(crds, doc, namespace), f"{case}: created anyway"


def test_at_least_25_bad_resources_are_covered() -> None:
    assert len(BAD) >= 25


@pytest.mark.parametrize(
    ("make", "path", "value", "message"),
    [
        (J, "spec.acceleratorsPerWorker", 8, "acceleratorsPerWorker is immutable once set"),
        (J, "spec.topology", {"unit": "node"}, "topology is immutable once set"),
        (J, "spec.podSets", [{"name": "launcher"}], "podSets is immutable once set"),
        (J, "spec.ultraServerGroup", "p5-pool", "ultraServerGroup is immutable once set"),
        (E, "spec.replicaShape", {"workers": 4, "acceleratorsPerWorker": 4},
         "replicaShape is immutable once set"),
        (ER, "spec.roles.decode.replicaShape", {"workers": 4, "acceleratorsPerWorker": 4},
         "roles.<role>.replicaShape is immutable once set"),
    ],
)
def test_fields_that_shape_the_gang_are_immutable(
        crds: Cluster, namespace: str, make: Callable[[str], Doc], path: str, value: Any,
        message: str) -> None:
    original = make("immutable")
    assert apply(crds, original, namespace).returncode == 0
    changed = copy.deepcopy(original)
    put(path, value)(changed)
    result = apply(crds, changed, namespace)
    assert result.returncode != 0
    assert path in result.stderr and message in result.stderr, result.stderr


def test_roles_cannot_be_added_or_removed(crds: Cluster, namespace: str) -> None:
    """A single-role endpoint and a disaggregated one name their pods differently: one
    cannot become the other in place."""
    original = disaggregated_endpoint("split")
    assert apply(crds, original, namespace).returncode == 0
    merged = copy.deepcopy(original)
    del merged["spec"]["roles"]
    merged["spec"]["replicaShape"] = {"workers": 2, "acceleratorsPerWorker": 4}
    result = apply(crds, merged, namespace)
    assert result.returncode != 0
    assert "roles cannot be added or removed" in result.stderr, result.stderr


def test_managed_by_cannot_be_added_or_removed(crds: Cluster, namespace: str) -> None:
    """Which cluster's operator runs a job is settled when it is created."""
    original = minimal_job("managed")
    assert apply(crds, original, namespace).returncode == 0
    changed = copy.deepcopy(original)
    changed["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    result = apply(crds, changed, namespace)
    assert result.returncode != 0
    assert "managedBy cannot be added or removed" in result.stderr, result.stderr


def test_scale_subresource_sets_replicas(crds: Cluster, namespace: str) -> None:
    assert apply(crds, minimal_endpoint("scalable"), namespace).returncode == 0
    crds.kubectl("scale", "ie/scalable", "--replicas", "3", "-n", namespace)
    spec = json.loads(crds.kubectl("get", "ie", "scalable", "-n", namespace, "-o", "json")
                      .stdout)["spec"]
    assert spec["replicas"] == 3


def test_status_fields_survive_a_status_write(crds: Cluster, namespace: str) -> None:
    """Every status field the operator writes is declared, so none is pruned."""
    assert apply(crds, minimal_job("status"), namespace).returncode == 0
    status = {
        "observedGeneration": 1, "phase": "Running", "message": "all 4 workers running",
        "workers": {"desired": 4, "ready": 4, "succeeded": 0, "failed": 0},
        "accelerators": 64, "restarts": 1,
        "placement": {"domains": ["us-a"], "workers": 4, "reason": "1 whole UltraServer",
                      "slices": [{"firstRank": 0, "domain": "us-a", "nodes": "n[0-3]"}]},
        "checkpoint": {"latest": {"step": 300, "path": "/ckpt/300"},
                       "latestVerified": {"step": 200, "path": "/ckpt/200"}},
        "goodput": {"ratio": 0.98, "productiveSeconds": 1000,
                    "lostSeconds": {"detection": 2, "replacement": 1, "restart": 5,
                                    "lostWork": 12}},
        "conditions": [{"type": "Running", "status": "True", "reason": "AllWorkersRunning",
                        "message": "", "lastTransitionTime": "2026-11-26T00:00:00Z"}],
        "cluster": "region-a", "workload": "trainingjob-status-1a2b3",
    }
    crds.kubectl("patch", "tj", "status", "-n", namespace, "--subresource", "status",
                 "--type", "merge", "-p", json.dumps({"status": status}))
    stored = json.loads(crds.kubectl("get", "tj", "status", "-n", namespace, "-o", "json")
                        .stdout)["status"]
    assert stored == status
    row = crds.kubectl("get", "tj", "status", "-n", namespace, "--no-headers").stdout.split()
    assert row[1:5] == ["Running", "4", "4", "64"]
