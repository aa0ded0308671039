"""LeaderWorkerSet as a peer (sandbox/lws.py, bench/autoscaling_peers.py --group-nodes):
what its manager and its webhooks are given, and the groups the autoscaling benchmark has
the HPA and KEDA scale (no LWS runs here: the benchmark itself needs the sandbox)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from bench import autoscaling_peers as bench

from goodput_operator.sandbox import build, lws
from goodput_operator.sandbox.versions import LWS_COMPONENT
from tests.unit.test_jobset_peer import MANIFESTS
from tests.unit.test_peers import schema_keys

pytestmark = pytest.mark.unit

GROUPED = bench.group_shape(2)


def test_lws_webhooks_point_at_its_process_and_see_only_a_leader_worker_sets_pods() -> None:
    mutating, validating = lws.webhook_configurations(MANIFESTS, 9443, b"CA")
    only_theirs = {"matchExpressions": [{"key": lws.LWS_NAME, "operator": "Exists"}]}
    [for_sets, for_pods] = mutating["webhooks"]
    assert "objectSelector" not in for_sets
    assert for_pods["objectSelector"] == only_theirs
    assert validating["webhooks"][0]["objectSelector"] == only_theirs
    assert for_pods["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate--v1-pod"
    assert {mutating["metadata"]["name"], validating["metadata"]["name"]} == {
        "goodput-lws-mutating", "goodput-lws-validating"}


def test_lws_manager_serves_on_loopback_without_leader_election_or_its_own_certs() -> None:
    config = lws.configuration({"health": 1, "metrics": 2, "webhook": 3}, Path("/c"))
    assert config["apiVersion"] == "config.lws.x-k8s.io/v1alpha1"
    assert config["webhook"] == {"host": "127.0.0.1", "port": 3, "certDir": "/c"}
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:1"
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"] == {"enable": False}


@pytest.mark.parametrize(("scaler", "exclusive"), [("hpa", False), ("keda", False),
                                                   ("hpa-tuned", True), ("keda-tuned", True)])
def test_the_peers_scale_groups_of_whole_nodes_exclusive_per_domain_when_tuned(
        scaler: str, exclusive: bool) -> None:
    target = bench.Target(scaler, "flash", [30.0] * 60, GROUPED)
    group = bench.workload(target, 3)
    assert group["kind"] == "LeaderWorkerSet" and group["spec"]["replicas"] == 3
    template = group["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    [server] = template["workerTemplate"]["spec"]["containers"]
    assert server["resources"]["requests"] == {bench.RESOURCE: "16"}  # a whole Trn2 node
    annotations = group["metadata"]["annotations"]
    assert (lws.EXCLUSIVE_TOPOLOGY in annotations) is exclusive
    if exclusive:
        assert annotations[lws.EXCLUSIVE_TOPOLOGY] == bench.TRN2.group.domain_key
    [obj] = bench.scaler_objects(target, "http://p", minimum=2)
    ref = obj["spec"]["scaleTargetRef"]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == (
        "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", scaler)
    high = obj["spec"].get("maxReplicas", obj["spec"].get("maxReplicaCount"))
    assert high == bench.MAX_GROUPS


def test_every_autoscaler_targets_a_group_by_what_it_serves() -> None:
    """A group serves GROUP_SPEEDUP single replicas' requests: each autoscaler is given the
    queue and the rate of one group, ours a replica of the same two whole nodes."""
    assert (GROUPED.mu, GROUPED.queued) == (bench.MU * bench.GROUP_SPEEDUP,
                                            bench.TARGET * bench.GROUP_SPEEDUP)
    ours = bench.scaler_objects(bench.Target("goodput", "flash", [30.0] * 60, GROUPED),
                                "http://p", 2)[0]["spec"]
    assert ours["replicaShape"] == {"workers": 2, "acceleratorsPerWorker": 16}
    assert [m["target"] for m in ours["scaling"]["metrics"]] == [GROUPED.mu, GROUPED.queued]
    [hpa] = bench.scaler_objects(bench.Target("hpa-tuned", "flash", [30.0] * 60, GROUPED),
                                 "http://p", 2)
    assert [m["pods"]["target"]["averageValue"] for m in hpa["spec"]["metrics"]] == [
        f"{GROUPED.queued:g}", f"{GROUPED.mu:g}"]
    assert bench.Target("hpa", "flash", [30.0] * 60, GROUPED).start == 2


def test_the_fleet_holds_every_target_at_its_most_and_a_whole_domain_per_exclusive_group(
        ) -> None:
    per_domain = bench.TRN2.group.nodes_per_domain
    plain = bench.Target("hpa", "flash", [1.0], GROUPED)
    exclusive = bench.Target("hpa-tuned", "flash", [1.0], GROUPED)
    assert bench.fleet_domains([plain]) == bench.MAX_GROUPS * 2 // per_domain
    assert bench.fleet_domains([exclusive]) == bench.MAX_GROUPS
    single = bench.Target("hpa", "flash", [1.0])
    assert bench.fleet_domains([single]) == 2  # 64 accelerators, twice over, 16 per node


def test_every_field_given_to_lws_is_one_its_crd_knows() -> None:
    if not build.is_built(LWS_COMPONENT):
        pytest.skip("LeaderWorkerSet not built here")
    crd = yaml.safe_load((build.module_dir(LWS_COMPONENT) / "config" / "crd" / "bases" /
                          "leaderworkerset.x-k8s.io_leaderworkersets.yaml").read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    group = bench.workload(bench.Target("hpa-tuned", "flash", [30.0] * 60, GROUPED), 2)
    assert schema_keys(schema, group["spec"], "hpa-tuned") == []
