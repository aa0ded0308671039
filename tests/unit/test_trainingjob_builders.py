"""What a TrainingJob's children look like: gated pods with rank env, Service, hostfile."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goodput_operator import names
from goodput_operator.api.ultraservergroup import UltraServerGroupSpec
from goodput_operator.resources import pods
from goodput_operator.resources import trainingjob as build
from goodput_operator.resources.fabric import Fabric
from goodput_operator.topology.constraints import pinned_node

pytestmark = pytest.mark.unit
NEURON = "aws.amazon.com/neuron"
TRN2 = Fabric(NEURON, 16)


def job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "goodput.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "llama", "namespace": "team-a", "uid": "uid-1"},
        "spec": {
            "ultraServerGroup": "trn2-pool", "workers": 4, "acceleratorsPerWorker": 16,
            "checkpoint": {"dir": "/fsx/ckpt"},
            "template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {"containers": [
                    {"name": "trainer", "image": "train:1",
                     "env": [{"name": "NCCL_DEBUG", "value": "WARN"},
                             {"name": "MASTER_PORT", "value": "1"}]},
                    {"name": "sidecar", "image": "logs:1"},
                ]},
            },
            **spec,
        },
    }


def env_of(pod: dict[str, Any], container: int = 0) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][container]["env"]
            if "value" in e}


def test_an_object_store_s_keys_come_from_the_job_s_secret_by_the_kubelet() -> None:
    pod = build.worker_pod(job(checkpoint={"dir": "s3://ckpt/llama",
                                           "credentialsSecret": "store"}), 0, 0, TRN2)
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in pod["spec"]["containers"][0]
            ["env"] if "valueFrom" in e}
    assert refs["AWS_ACCESS_KEY_ID"] == {"name": "store", "key": "AWS_ACCESS_KEY_ID",
                                         "optional": False}
    assert refs["AWS_ENDPOINT_URL"]["optional"] is True
    assert env_of(pod)["GOODPUT_CHECKPOINT_DIR"] == "s3://ckpt/llama"
    assert "GOODPUT_CHECKPOINT_SHARED" not in env_of(pod)
    tiered = build.worker_pod(job(checkpoint={"dir": "s3://ckpt/llama",
                                              "sharedDir": "/fsx/llama"}), 0, 0, TRN2)
    assert env_of(tiered)["GOODPUT_CHECKPOINT_SHARED"] == "/fsx/llama"
    assert not any("valueFrom" in e for e in build.worker_pod(job(), 0, 0, TRN2)["spec"]
                   ["containers"][0]["env"])


def test_pods_are_born_gated_owned_and_labelled() -> None:
    pod = build.worker_pod(job(), 2, restart=0, fabric=TRN2)
    assert pod["metadata"]["name"] == "llama-r0-w2"
    assert pods.is_gated(pod)
    assert pod["metadata"]["ownerReferences"][0] == {
        "apiVersion": "goodput.dev/v1alpha1", "kind": "TrainingJob", "name": "llama",
        "uid": "uid-1", "controller": True, "blockOwnerDeletion": True}
    assert pod["metadata"]["labels"] == {
        "team": "a", names.JOB_LABEL: "llama", names.RANK_LABEL: "2",
        names.RESTART_LABEL: "0", "app.kubernetes.io/managed-by": "goodput-operator"}
    assert pod["spec"]["restartPolicy"] == "Never"
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("w2", "llama")


def test_only_the_worker_container_requests_the_accelerators() -> None:
    pod = build.worker_pod(job(), 0, 0, TRN2)
    trainer, sidecar = pod["spec"]["containers"]
    assert trainer["resources"] == {"requests": {NEURON: "16"}, "limits": {NEURON: "16"}}
    assert "resources" not in sidecar


def test_torchrun_environment() -> None:
    env = env_of(build.worker_pod(job(), 3, 0, TRN2))
    assert env["MASTER_ADDR"] == "w0.llama.team-a.svc"
    assert env["MASTER_PORT"] == "29500"           # ours wins over the template's
    assert (env["NNODES"], env["NODE_RANK"], env["NPROC_PER_NODE"]) == ("4", "3", "16")
    assert (env["WORLD_SIZE"], env["RANK"]) == ("64", "48")
    assert env["NCCL_DEBUG"] == "WARN"             # the template's own env is kept
    assert env["GOODPUT_JOB"] == "team-a/llama"
    assert env["GOODPUT_CHECKPOINT_DIR"] == "/fsx/ckpt"
    assert env["GOODPUT_RESUME_FROM"] == ""
    assert "NEURON_RT_ROOT_COMM_ID" not in env


def test_neuron_environment_and_restart() -> None:
    spec = {"launcher": {"type": "neuron", "port": 41000, "procsPerWorker": 32}}
    pod = build.worker_pod(job(**spec), 1, restart=2, fabric=TRN2,
                           resume={"step": 200, "path": "/fsx/ckpt/step-200",
                                   "digest": "sha256:ab"})
    env = env_of(pod)
    assert env["NEURON_RT_ROOT_COMM_ID"] == "w0.llama.team-a.svc:41001"
    assert (env["FI_PROVIDER"], env["FI_EFA_USE_DEVICE_RDMA"]) == ("efa", "1")
    assert (env["NPROC_PER_NODE"], env["WORLD_SIZE"]) == ("32", "128")
    assert (env["GOODPUT_RESTART"], env["GOODPUT_RESUME_FROM"]) == ("2", "/fsx/ckpt/step-200")
    assert (env["GOODPUT_RESUME_STEP"], env["GOODPUT_RESUME_DIGEST"]) == ("200", "sha256:ab")
    assert pod["metadata"]["name"] == "llama-r2-w1"


@pytest.mark.parametrize(("launcher", "mpi"), [("mpi", True), ("none", False)])
def test_mpi_points_mpirun_at_the_hostfile_and_none_gets_only_our_variables(
        launcher: str, mpi: bool) -> None:
    env = env_of(build.worker_pod(job(launcher={"type": launcher}), 0, 0, TRN2))
    assert "MASTER_ADDR" not in env and env["GOODPUT_HOSTFILE"] == "/etc/goodput/hostfile"
    hostfiles = {env.get("OMPI_MCA_orte_default_hostfile"),
                 env.get("PRTE_MCA_prte_default_hostfile")}
    assert hostfiles == ({"/etc/goodput/hostfile"} if mpi else {None})


def test_every_container_sees_the_hostfile() -> None:
    pod = build.worker_pod(job(), 0, 0, TRN2)
    for container in pod["spec"]["containers"]:
        assert {"name": "goodput-hostfile", "mountPath": "/etc/goodput",
                "readOnly": True} in container["volumeMounts"]
    assert {"name": "goodput-hostfile", "configMap": {"name": "llama-hostfile"}} in \
        pod["spec"]["volumes"]


def test_a_failed_containers_log_tail_is_its_termination_message_unless_the_template_says() -> None:
    """What the incident of an application error quotes (health.failures.last_words)."""
    spec = job()
    spec["spec"]["template"]["spec"]["containers"][1]["terminationMessagePolicy"] = "File"
    pod = build.worker_pod(spec, 0, 0, TRN2)
    assert [c["terminationMessagePolicy"] for c in pod["spec"]["containers"]] == \
        ["FallbackToLogsOnError", "File"]


def test_every_container_gets_a_report_token_of_its_own_audience_and_the_url() -> None:
    pod = build.worker_pod(job(), 0, 0, TRN2, report_url="https://op.goodput:8081")
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "goodput-report-token")
    assert volume["projected"]["sources"] == [{"serviceAccountToken": {
        "audience": names.REPORT_AUDIENCE, "expirationSeconds": 3600, "path": "token"}}]
    for container in pod["spec"]["containers"]:
        assert {"name": "goodput-report-token", "readOnly": True,
                "mountPath": "/var/run/secrets/goodput.dev/report"} in container["volumeMounts"]
    env = env_of(pod)
    assert env["GOODPUT_REPORT_URL"] == "https://op.goodput:8081"
    assert env["GOODPUT_REPORT_TOKEN"] == "/var/run/secrets/goodput.dev/report/token"


def test_hostfile_lists_workers_in_rank_order_by_their_namespace_relative_names() -> None:
    config = build.hostfile(job(), 4)
    assert config["data"]["hostfile"].splitlines() == [f"w{i}.llama slots=16" for i in range(4)]
    assert set(config["data"]) == {"hostfile"}


def test_the_largest_gang_s_hostfile_fits_a_config_map_whatever_its_names() -> None:
    """8192 workers (the cap), a 63-character job name in a 63-character namespace: the
    API server refuses a ConfigMap over 1 MiB, so the hostfile must stay under it."""
    big = job()
    big["metadata"] |= {"name": "j" * 63, "namespace": "n" * 63}
    data = build.hostfile(big, 8192, report_ca="x" * 8192)["data"]
    assert sum(len(v.encode()) for v in data.values()) < 1 << 20


def test_headless_service() -> None:
    svc = build.service(job())
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {names.JOB_LABEL: "llama"}
    assert svc["spec"]["publishNotReadyAddresses"] is True


@pytest.mark.parametrize("spec, pods", [
    ({}, 4),
    ({"elastic": {"minWorkers": 2}}, 4),                         # the most elastic allows
    ({"podSets": [{"name": "launcher"}, {"name": "ps", "replicas": 3}]}, 8),
])
def test_the_disruption_budget_holds_every_pod_the_gang_can_have(spec: dict[str, Any],
                                                                  pods: int) -> None:
    """A drain's evictions wait for the notice's save (docs/recovery.md); a number, not a
    percentage: the disruption controller finds no scale on a TrainingJob."""
    budget = build.disruption_budget(job(**spec))
    assert budget["apiVersion"] == "policy/v1" and budget["metadata"]["name"] == "llama"
    assert budget["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert budget["spec"] == {"minAvailable": pods,
                              "selector": {"matchLabels": {names.JOB_LABEL: "llama"}},
                              "unhealthyPodEvictionPolicy": "AlwaysAllow"}


def test_pin_narrows_affinity_and_removes_only_our_gate() -> None:
    pod = build.worker_pod(job(), 0, 0, TRN2)
    pod["spec"]["schedulingGates"].append({"name": "example.com/other"})
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}}
    patch = pods.pin(pod, "trn2-00-3", "us-1")
    terms = patch["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 2
    for term in terms:  # the tenant's own requirement kept, the node named by its name
        assert len(term["matchExpressions"]) == 1
        assert term["matchFields"] == [{"key": "metadata.name", "operator": "In",
                                        "values": ["trn2-00-3"]}]
    assert patch["spec"]["schedulingGates"] == [{"name": "example.com/other"}]
    assert patch["metadata"]["annotations"] == {names.DOMAIN_ANNOTATION: "us-1",
                                               names.NODE_ANNOTATION: "trn2-00-3"}


SERVICE = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@pytest.mark.parametrize(("job_name", "service", "pod"), [
    ("llama", "llama", "llama-r0-w3"),                       # valid names stay as they are
    ("llama-3.1-8b", "llama-3-1-8b-7b6335", "llama-3.1-8b-r0-w3"),  # no dots in a Service
    ("70b", "x70b-d1e53e", "70b-r0-w3"),                     # a Service starts with a letter
    ("x" * 63, "x" * 63, f"{'x' * 50}-75220b-r0-w3"),        # cut, and tagged by a hash
])
def test_child_names_are_valid_and_readable(job_name: str, service: str, pod: str) -> None:
    assert build.service_name(job_name) == service
    assert build.pod_name(job_name, 0, 3) == pod


@given(st.from_regex(SUBDOMAIN, fullmatch=True).filter(lambda n: len(n) <= 63),
       st.from_regex(SUBDOMAIN, fullmatch=True).filter(lambda n: len(n) <= 63))
def test_child_names_are_valid_and_never_shared_between_two_jobs(a: str, b: str) -> None:
    """Whatever a job is called (metadata.name: a DNS subdomain of at most 63 characters,
    CEL-checked), its Service, hostfile and pods get valid names, and two jobs never get the
    same one (names cut to a common prefix used to collide)."""
    for name in (a, b):
        assert SERVICE.fullmatch(build.service_name(name)) and \
            len(build.service_name(name)) <= 63
        for child in (build.hostfile_name(name), build.pod_name(name, 99, 16383)):
            assert SUBDOMAIN.fullmatch(child) and len(child) <= 63, child
    if a != b:
        assert build.service_name(a) != build.service_name(b)
        assert build.pod_name(a, 1, 2) != build.pod_name(b, 1, 2)
        assert build.hostfile_name(a) != build.hostfile_name(b)


@pytest.mark.parametrize(("labels", "rank", "attempt"), [
    ({names.RANK_LABEL: "3", names.RESTART_LABEL: "1"}, 3, 1),
    ({names.RANK_LABEL: "abc", names.RESTART_LABEL: "-2"}, -1, -1),
    ({names.RANK_LABEL: "1e3", names.RESTART_LABEL: "٣"}, -1, -1),  # Arabic-Indic 3
    ({}, -1, -1),
])
def test_rank_and_attempt_labels_never_raise(labels: dict[str, str], rank: int,
                                             attempt: int) -> None:
    pod = {"metadata": {"labels": labels}}
    assert (pods.index_of(pod), pods.attempt_of(pod)) == (rank, attempt)


def test_a_placed_rank_is_created_pinned_and_ungated() -> None:
    pod = build.worker_pod(job(), 1, 0, TRN2)
    ready = pods.pinned(pod, "trn2-00-1", "us-0")
    assert not pods.is_gated(ready) and pods.is_gated(pod)   # the original is untouched
    term = ready["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In",
                                    "values": ["trn2-00-1"]}]  # the scheduler checks one node
    assert pinned_node(ready["spec"]) == "trn2-00-1"  # and the capacity books see it there
    assert ready["metadata"]["annotations"] == {names.DOMAIN_ANNOTATION: "us-0",
                                                names.NODE_ANNOTATION: "trn2-00-1"}


P5 = Fabric("nvidia.com/gpu", 8, efa_per_node=32)
EFA_SETTINGS = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1"}


@pytest.mark.parametrize(("fabric", "launcher", "per_worker", "efa", "settings"), [
    # a whole p5.48xlarge: all 32 EFA interfaces, NCCL over EFA
    (P5, "torchrun", 8, "32", {**EFA_SETTINGS, "NCCL_SOCKET_IFNAME": "^lo,docker"}),
    (P5, "mpi", 8, "32", {**EFA_SETTINGS, "NCCL_SOCKET_IFNAME": "^lo,docker"}),
    (P5, "torchrun", 4, "16", {**EFA_SETTINGS, "NCCL_SOCKET_IFNAME": "^lo,docker"}),  # half
    (P5, "torchrun", 1, "4", {**EFA_SETTINGS, "NCCL_SOCKET_IFNAME": "^lo,docker"}),
    (Fabric("nvidia.com/gpu", 8, efa_per_node=1), "torchrun", 1, "1",  # at least one
     {**EFA_SETTINGS, "NCCL_SOCKET_IFNAME": "^lo,docker"}),
    (Fabric("nvidia.com/gpu", 8), "torchrun", 8, None,  # no EFA in the group: sockets
     {"NCCL_SOCKET_IFNAME": "^lo,docker"}),
    (Fabric(NEURON, 16, efa_per_node=16), "neuron", 16, "16", EFA_SETTINGS),
    (TRN2, "neuron", 16, None, EFA_SETTINGS),     # as the Neuron launcher always had
    (P5, "none", 8, "32", EFA_SETTINGS),          # our variables only: no NCCL's
])
def test_a_worker_requests_its_share_of_efa_and_gets_the_fabrics_settings(
        fabric: Fabric, launcher: str, per_worker: int, efa: str | None,
        settings: dict[str, str]) -> None:
    pod = build.worker_pod(job(acceleratorsPerWorker=per_worker, launcher={"type": launcher}),
                           0, 0, fabric)
    trainer, sidecar = pod["spec"]["containers"]
    requests = trainer["resources"]["requests"]
    assert requests.get("vpc.amazonaws.com/efa") == efa
    assert trainer["resources"]["limits"] == requests
    assert requests[fabric.resource] == str(per_worker)
    env = env_of(pod)
    fabric_keys = {k for k in env if k.startswith(("FI_", "NCCL_SOCKET"))}
    assert {k: env[k] for k in fabric_keys} == settings
    assert "resources" not in sidecar and env_of(pod, 1).keys() >= settings.keys()


ND_H100_V5 = Fabric("nvidia.com/gpu", 8, rdma=True, rdma_resource="rdma/ib")


@pytest.mark.parametrize(("fabric", "launcher", "per_worker", "rdma", "net"), [
    (ND_H100_V5, "torchrun", 8, "1", "IB"),  # one grant of the shared plugin: every HCA
    (ND_H100_V5, "torchrun", 2, "1", "IB"),  # a part of the node still needs its HCA
    (Fabric("nvidia.com/gpu", 8, rdma=True, rdma_resource="nvidia.com/sriov_vf",
            rdma_per_pod=8), "mpi", 8, "8", "IB"),  # SR-IOV: a VF per GPU
    (Fabric("nvidia.com/gpu", 8, rdma=True), "torchrun", 8, None, "IB"),  # HCAs: the template's
    (ND_H100_V5, "none", 8, "1", None),  # our variables only: no NCCL's
])
def test_an_rdma_worker_requests_its_devices_and_nccl_uses_ib_verbs_only(
        fabric: Fabric, launcher: str, per_worker: int, rdma: str | None,
        net: str | None) -> None:
    pod = build.worker_pod(job(acceleratorsPerWorker=per_worker, launcher={"type": launcher}),
                           0, 0, fabric)
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    assert requests.get(fabric.rdma_resource or "rdma/ib") == rdma
    assert "vpc.amazonaws.com/efa" not in requests
    env = env_of(pod)
    assert env.get("NCCL_NET") == net and "FI_PROVIDER" not in env


@pytest.mark.parametrize(("interconnect", "rdma"), [
    ("infiniband", True), ("roce", True), ("efa-only", False), ("nvlink", False)])
def test_the_groups_interconnect_says_whether_nccl_goes_over_ib_verbs(
        interconnect: str, rdma: bool) -> None:
    spec = UltraServerGroupSpec.model_validate({
        "nodeSelector": {"pool": "x"}, "nodesPerDomain": 4, "interconnect": interconnect,
        "accelerator": {"resource": "nvidia.com/gpu", "perNode": 8,
                        "rdmaResource": "rdma/ib"}})
    fabric = Fabric.of(spec)
    assert (fabric.rdma, fabric.rdma_resource, fabric.rdma_per_pod) == (rdma, "rdma/ib", 1)


def test_the_templates_own_fabric_settings_win() -> None:
    spec = job(acceleratorsPerWorker=8)
    spec["spec"]["template"]["spec"]["containers"][0]["env"] += [
        {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "0"},
        {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}]
    env = env_of(build.worker_pod(spec, 0, 0, P5))
    assert (env["FI_EFA_USE_DEVICE_RDMA"], env["NCCL_SOCKET_IFNAME"]) == ("0", "eth0")
    assert env["FI_PROVIDER"] == "efa" and env["NCCL_DEBUG"] == "WARN"


def test_a_cpu_only_companion_gets_no_efa() -> None:
    spec = job(acceleratorsPerWorker=8, podSets=[
        {"name": "launcher", "replicas": 1, "acceleratorsPerPod": 0}])
    parsed = build.TrainingJobSpec.model_validate(spec["spec"])
    leader = build.companion_pod(spec, parsed.pod_sets[0], 0, 0, P5, spec=parsed)
    assert "vpc.amazonaws.com/efa" not in (
        leader["spec"]["containers"][0].get("resources") or {}).get("requests", {})


GB200 = Fabric("nvidia.com/gpu", 4, efa_per_node=8, imex=True)


def test_a_multi_node_nvlink_gang_claims_its_jobs_imex_channel() -> None:
    spec = job(workers=16, acceleratorsPerWorker=4, ultraServerGroup="nvl72", podSets=[
        {"name": "launcher", "replicas": 1, "acceleratorsPerPod": 0},
        {"name": "ps", "replicas": 1, "acceleratorsPerPod": 1}])
    parsed = build.TrainingJobSpec.model_validate(spec["spec"])
    worker = build.worker_pod(spec, 3, 2, GB200, spec=parsed)
    assert worker["spec"]["resourceClaims"] == [
        {"name": "imex-channel", "resourceClaimTemplateName": "llama-imex-channel"}]
    trainer, sidecar = worker["spec"]["containers"]
    assert trainer["resources"]["claims"] == [{"name": "imex-channel"}]
    assert "claims" not in sidecar.get("resources", {})
    launcher, ps = (build.companion_pod(spec, s, 0, 2, GB200, spec=parsed)
                    for s in parsed.pod_sets)
    assert "resourceClaims" not in launcher["spec"]           # no GPU, no channel
    assert ps["spec"]["resourceClaims"] == worker["spec"]["resourceClaims"]
    [domain] = build.claim_sources(spec, [launcher, worker], None)
    assert domain["kind"] == "ComputeDomain" and domain["metadata"]["name"] == "llama-imex"
    assert domain["spec"] == {"numNodes": 0, "channel": {
        "resourceClaimTemplate": {"name": "llama-imex-channel"}, "allocationMode": "Single"}}
    assert domain["metadata"]["ownerReferences"][0]["uid"] == "uid-1"  # deleted with the job
    assert build.claim_sources(spec, [launcher], None) == []


@pytest.mark.parametrize(("fabric", "workers"), [
    (GB200, 1),                                          # one node: NVLink inside it
    (Fabric("nvidia.com/gpu", 4, imex=False), 16),       # computeDomains: false
    (P5, 4),                                             # no multi-node NVLink
])
def test_no_imex_channel_where_no_compute_domain_is_needed(fabric: Fabric, workers: int) -> None:
    pod = build.worker_pod(job(workers=workers, acceleratorsPerWorker=4), 0, 0, fabric)
    assert "resourceClaims" not in pod["spec"]
    assert build.claim_sources(job(), [pod], None) == []


def test_the_groups_interconnect_and_opt_out_decide_imex() -> None:
    base = {"nodeSelector": {"a": "b"}, "nodesPerDomain": 18,
            "accelerator": {"resource": "nvidia.com/gpu", "perNode": 4}}
    nvlink = UltraServerGroupSpec.model_validate({**base, "interconnect": "nvlink"})
    assert Fabric.of(nvlink).imex
    assert not Fabric.of(nvlink.model_copy(update={"compute_domains": False})).imex
    assert not Fabric.of(UltraServerGroupSpec.model_validate(
        {**base, "interconnect": "efa-only"})).imex


TRN2_DRA = Fabric(NEURON, 16, efa_per_node=16, device_class="neuron.aws.com")


def test_with_resource_claims_a_pod_claims_its_devices_through_the_jobs_template() -> None:
    spec = job(podSets=[{"name": "leader", "replicas": 1, "acceleratorsPerPod": 1},
                        {"name": "launcher", "replicas": 1, "acceleratorsPerPod": 0}])
    parsed = build.TrainingJobSpec.model_validate(spec["spec"])
    worker = build.worker_pod(spec, 0, 0, TRN2_DRA, spec=parsed)
    trainer = worker["spec"]["containers"][0]
    assert NEURON not in trainer["resources"]["requests"]      # no extended resource
    assert trainer["resources"]["requests"]["vpc.amazonaws.com/efa"] == "16"
    assert worker["spec"]["resourceClaims"] == [
        {"name": "accelerators", "resourceClaimTemplateName": "llama-accelerators-16"}]
    assert trainer["resources"]["claims"] == [{"name": "accelerators"}]
    assert worker["metadata"]["annotations"][names.ACCELERATORS_ANNOTATION] == "16"
    leader, launcher = (build.companion_pod(spec, s, 0, 0, TRN2_DRA, spec=parsed)
                        for s in parsed.pod_sets)
    sources = build.claim_sources(spec, [worker, leader, launcher], "neuron.aws.com")
    assert [(s["kind"], s["metadata"]["name"]) for s in sources] == [
        ("ResourceClaimTemplate", "llama-accelerators-16"),
        ("ResourceClaimTemplate", "llama-accelerators-1")]     # none for the CPU launcher
    request = sources[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request == {"deviceClassName": "neuron.aws.com", "allocationMode": "ExactCount",
                       "count": 16}
    assert sources[0]["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert build.claim_sources(spec, [build.worker_pod(spec, 0, 0, TRN2)], None) == []


@pytest.mark.parametrize(("accelerator", "style", "device_class"), [
    ({"resource": NEURON, "perNode": 16}, None, None),
    ({"resource": NEURON, "perNode": 16, "requestStyle": "ResourceClaim"}, "ResourceClaim",
     "neuron.aws.com"),
    ({"resource": "nvidia.com/gpu", "perNode": 8, "requestStyle": "ResourceClaim"},
     "ResourceClaim", "gpu.nvidia.com"),
    ({"resource": NEURON, "perNode": 16, "requestStyle": "ResourceClaim",
      "deviceClassName": "neuron-lnc2.example.com"}, "ResourceClaim", "neuron-lnc2.example.com"),
])
def test_the_device_class_follows_the_resource_unless_named(
        accelerator: dict[str, Any], style: str | None, device_class: str | None) -> None:
    spec = UltraServerGroupSpec.model_validate({"nodeSelector": {"a": "b"},
                                                "nodesPerDomain": 4, "accelerator": accelerator})
    assert spec.accelerator.device_class == device_class
    assert Fabric.of(spec).device_class == device_class
