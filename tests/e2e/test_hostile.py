"""A careless or hostile tenant against the shared operator: every bad object gets a clear
answer, and the operator keeps serving everybody else."""

from __future__ import annotations

import base64
import json
import math
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.sdk import Reporter, ReportError
from goodput_operator.topology.record import ranks_of
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    Faults,
    Operator,
    apply,
    counter,
    get_job,
    get_object,
    job_pods,
    training_job,
    trn2_pool,
    wait_event,
    wait_phase,
)
from tests.e2e.test_recovery import (
    group_status,
    quarantined,
    running_again,
    worker_token,
)

pytestmark = pytest.mark.e2e


def test_a_nan_loss_reaches_status_progress_and_every_later_status_write_lands(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str) -> None:
    apply(crds, training_job("nan", trn2_group, 1), namespace)
    wait_phase(crds, namespace, "nan", "Running")
    pod = job_pods(crds, namespace, "nan")[0]["metadata"]["name"]
    worker = Reporter(e2e.report_url, worker_token(crds, namespace, pod),
                      job=f"{namespace}/nan")
    worker.report_step(10, {"loss": math.nan, "gradNorm": math.inf, "lr": 1e-4})

    def progress() -> dict[str, Any] | None:
        found: dict[str, Any] | None = get_job(crds, namespace, "nan")["status"].get("progress")
        return found if found and found["step"] == 10 else None
    seen = wait_for(progress, timeout=30, what="the NaN step in status.progress")
    assert seen["metrics"] == {"lr": 1e-4}
    assert seen["nonFinite"] == {"loss": "NaN", "gradNorm": "+Inf"}

    crds.kubectl("patch", "tj", "nan", "-n", namespace, "--type=merge",
                 "-p", '{"spec": {"suspend": true}}')
    wait_phase(crds, namespace, "nan", "Suspended")  # later status writes still land


def test_workers_the_api_server_refuses_are_reported_then_the_job_fails_and_frees_its_nodes(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str) -> None:
    """PodSecurity admission applies to the pods the operator creates: a privileged
    template in a `restricted` namespace is refused, said so on a condition and an event,
    and after a few tries the job fails, giving back the whole pool it had reserved."""
    restricted = "pod-security.kubernetes.io/enforce"
    crds.kubectl("label", "namespace", namespace, f"{restricted}=restricted")
    privileged = training_job("priv", trn2_group, 8)
    privileged["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {
        "privileged": True}
    apply(crds, privileged, namespace)

    def refused() -> dict[str, Any] | None:
        conditions = get_job(crds, namespace, "priv").get("status", {}).get("conditions", [])
        return next((c for c in conditions if c["type"] == "WorkersCreated"
                     and c["reason"] == "CreateRefused"), None)
    condition = wait_for(refused, timeout=30, what="the WorkersCreated=False condition")
    assert "violates PodSecurity" in condition["message"]
    wait_event(crds, "priv", "CreateRefused", "violates PodSecurity", namespace=namespace)
    failed = wait_phase(crds, namespace, "priv", "Failed", timeout=90)
    assert "refused to create the workers (5 time(s))" in failed["status"]["message"]
    assert failed["status"]["accelerators"] == 0

    crds.kubectl("label", "namespace", namespace, f"{restricted}-")
    apply(crds, training_job("after", trn2_group, 8), namespace)  # the whole pool again
    wait_phase(crds, namespace, "after", "Running")


def test_a_pod_asking_for_1000_devices_stops_neither_a_pass_nor_a_start(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str) -> None:
    """The API server stores a request of 1000 devices as `1k`: the operator reads it as
    1000 (it used to raise in the initial sync, so no replica could start leading)."""
    apply(crds, greedy_pod(), namespace)
    try:
        stored = get_object(crds, "pod", namespace, "greedy")["spec"]["containers"][0]
        assert stored["resources"]["requests"]["aws.amazon.com/neuron"] == "1k"
        e2e.stop()
        e2e.start()  # the initial sync lists the pod
        wait_for(lambda: e2e.readiness().get("ok"), timeout=30,
                 what="the restarted operator ready")
        apply(crds, training_job("after-1k", trn2_group, 4), namespace)
        wait_phase(crds, namespace, "after-1k", "Running")
    finally:
        crds.kubectl("delete", "pod", "greedy", "-n", namespace, "--wait=false")


def bogus_token(index: int) -> str:
    """Shaped like a live report token (right audience, unexpired, bound to a pod), so only
    a TokenReview can refuse it: what a flood that gets past the claims check looks like."""
    def part(data: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")
    claims = {"aud": [names.REPORT_AUDIENCE], "exp": time.time() + 3600,
              "kubernetes.io": {"namespace": "x", "pod": {"name": f"p{index}", "uid": "u"}}}
    return f"{part({'alg': 'RS256'})}.{part(claims)}.{part(index)}"


def flood(url: str, tokens: int) -> dict[int, int]:
    """Reports with TOKENS new bogus tokens, 16 at once: the answers' status codes."""
    def one(index: int) -> int:
        try:
            Reporter(url, bogus_token(index), retries=0).report_step(1)
        except ReportError as err:
            return err.status or 0
        return 200
    with ThreadPoolExecutor(16) as pool:
        return dict(Counter(pool.map(one, range(tokens))))


def test_a_hostile_tenant_cannot_stop_another_teams_recovery(
        e2e: Operator, crds: Cluster, namespace: str, make_group: Any,
        faults: Faults) -> None:
    """One namespace applies every bad object of issue 16 at once; meanwhile another
    team's job loses a node and recovers on its UltraServer's spare as usual."""
    group = make_group(spares={"perDomain": 1})
    apply(crds, training_job("victim", group, 3, checkpoint={"dir": "/fsx/victim"}),
          namespace)
    job = wait_phase(crds, namespace, "victim", "Running")
    before = {r["rank"]: r["node"] for r in ranks_of(job["status"]["placement"])}

    hostile = f"{namespace[:50]}-evil"
    crds.kubectl("create", "namespace", hostile)
    crds.kubectl("label", "namespace", hostile, "pod-security.kubernetes.io/enforce=restricted")
    forged = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "impostor", "labels": {
        names.JOB_LABEL: "victim", names.RANK_LABEL: "abc", names.RESTART_LABEL: "0"}},
        "spec": {"nodeSelector": {"example.com/nowhere": "true"},
                 "containers": [{"name": "c", "image": "example.com/c:1"}]}}
    try:
        privileged = training_job("priv", group, 2)
        privileged["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {
            "privileged": True}
        apply(crds, privileged, hostile)
        apply(crds, endpoint_spying_on("http://169.254.169.254/latest/meta-data", group),
              hostile)
        apply(crds, greedy_pod(), hostile)
        apply(crds, forged, namespace)  # a careless teammate's pod with the job's labels
        too_long, pinned = training_job("x" * 64, group, 1), training_job("pinned", group, 1)
        pinned["spec"]["template"]["spec"]["nodeName"] = before[0]
        huge = training_job("huge", group, 100_000)      # 479 MiB of pod bodies, once
        for bad in (too_long, pinned, huge):
            refused = crds.kubectl("apply", "-n", hostile, "-f", "-",
                                   input_text=json.dumps(bad), check=False)
            assert refused.returncode != 0, bad["metadata"]["name"]
        reviews = counter(e2e, "goodput_token_reviews_total", outcome="rejected")
        answers = flood(e2e.report_url, 300)
        assert answers.get(429, 0) > 200 and answers.get(401, 0) >= 20, answers
        assert counter(e2e, "goodput_token_reviews_total", outcome="rejected") - reviews < 100

        faults.fail(before[1])                         # the other team's node fails
        job = running_again(crds, namespace, "victim", 1, timeout=60)
        after = {r["rank"]: r["node"] for r in ranks_of(job["status"]["placement"])}
        assert after[0] == before[0] and after[2] == before[2] and after[1] != before[1]

        failed = wait_phase(crds, hostile, "priv", "Failed", timeout=90)
        assert "violates PodSecurity" in failed["status"]["message"]
        spying = get_object(crds, "ie", hostile, "spy")
        condition = next(c for c in spying["status"]["conditions"]
                         if c["type"] == "MetricsUnavailable")
        assert condition["status"] == "True" and "not one the operator may query" in \
            condition["message"]
        assert e2e.healthy()
    finally:
        crds.kubectl("delete", "pod", "impostor", "-n", namespace, "--wait=false",
                     check=False)
        crds.kubectl("delete", "tj,ie,pods", "--all", "-n", hostile, "--wait=true",
                     check=False)
        crds.kubectl("delete", "namespace", hostile, "--wait=false", check=False)


def greedy_pod() -> dict[str, Any]:
    """A pod asking for 1000 devices (stored as 1k), admissible in a restricted namespace."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "greedy"},
            "spec": {"nodeSelector": {"example.com/nowhere": "true"},
                     "securityContext": {"runAsNonRoot": True,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "c", "image": "example.com/c:1",
                                     "securityContext": {"allowPrivilegeEscalation": False,
                                                         "capabilities": {"drop": ["ALL"]}},
                                     "resources": {
                                         "requests": {"aws.amazon.com/neuron": "1000"},
                                         "limits": {"aws.amazon.com/neuron": "1000"}}}]}}


def inference_endpoint(name: str, group: str, **spec: Any) -> dict[str, Any]:
    """A one-pod-per-replica endpoint of GROUP with SPEC's fields on top."""
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "InferenceEndpoint",
            "metadata": {"name": name},
            "spec": {"ultraServerGroup": group, "model": {"name": "m"},
                     "replicaShape": {"workers": 1, "acceleratorsPerWorker": 16},
                     "template": {"spec": {"containers": [{"name": "s", "image": "s:1"}]}},
                     **spec}}


def endpoint_spying_on(url: str, group: str) -> dict[str, Any]:
    """An endpoint whose autoscaler would fetch URL (cloud metadata, say) for its metrics."""
    return inference_endpoint("spy", group, scaling={
        "minReplicas": 0, "maxReplicas": 1, "intervalSeconds": 1,
        "scaleToZeroAfterSeconds": 60, "prometheusUrl": url,
        "metrics": [{"type": "QueueDepth", "target": 8}]})


def test_a_tenants_votes_cannot_hold_back_the_quarantine_of_a_failing_node(
        e2e: Operator, crds: Cluster, namespace: str, make_group: Any,
        faults: Faults) -> None:
    """The storm guard counts node health only: a node its job's replicas voted corrupt
    goes out on blame's own budget, and a real failure elsewhere is still quarantined at
    once (maxUnavailable 1: before, the two together held both as a storm)."""
    group = make_group(quarantine={"maxUnavailable": 1})
    apply(crds, training_job("votes", group, 3, checkpoint={"dir": "/fsx/votes"},
                             sdc={"crossReplicaCheck": True}), namespace)
    job = wait_phase(crds, namespace, "votes", "Running")
    placed = {r["rank"]: r["node"] for r in ranks_of(job["status"]["placement"])}
    workers = {int(p["metadata"]["labels"][names.RANK_LABEL]):
               Reporter(e2e.report_url, worker_token(crds, namespace, p["metadata"]["name"]),
                        job=f"{namespace}/votes")
               for p in job_pods(crds, namespace, "votes")}
    for rank, worker in workers.items():                  # rank 2 "diverges"
        worker.report_step(100, {"loss": 1.0},
                           fingerprint=("00c0ffee" if rank != 2 else "deadbeef") * 4)
    wait_for(lambda: quarantined(crds, placed[2]), timeout=30,
             what="the voted-out node quarantined")
    victim = next(n for n in trn2_pool(crds) if n not in placed.values())
    faults.fail(victim)
    wait_for(lambda: quarantined(crds, victim), timeout=30,
             what="the failing node quarantined despite the blamed one")
    storm = next(c for c in group_status(crds, group).get("conditions") or []
                 if c["type"] == "StormGuard")
    assert storm["status"] == "False"


def test_an_endpoint_whose_pods_are_refused_says_why_on_its_ready_condition(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str) -> None:
    crds.kubectl("label", "namespace", namespace,
                 "pod-security.kubernetes.io/enforce=restricted")
    privileged = inference_endpoint("priv", trn2_group, replicas=1, template={"spec": {
        "containers": [{"name": "s", "image": "s:1",
                        "securityContext": {"privileged": True}}]}})
    apply(crds, privileged, namespace)

    def refused() -> dict[str, Any] | None:
        conditions = (get_object(crds, "ie", namespace, "priv").get("status") or {}).get(
            "conditions") or []
        return next((c for c in conditions if c["type"] == "Ready"
                     and c["reason"] == "PodCreateRefused"), None)
    condition = wait_for(refused, timeout=30, what="Ready=False, PodCreateRefused")
    assert "violates PodSecurity" in condition["message"]
    wait_event(crds, "priv", "PodCreateRefused", "violates PodSecurity", namespace=namespace)
    crds.kubectl("delete", "ie", "priv", "-n", namespace, "--wait=true")
