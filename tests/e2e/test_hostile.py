"""A careless or hostile tenant against the shared operator: every bad object gets a clear
answer, and the operator keeps serving everybody else."""

from __future__ import annotations

import math
from typing import Any

import pytest

from goodput_operator.sdk import Reporter
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    Operator,
    apply,
    get_job,
    get_object,
    job_pods,
    training_job,
    wait_event,
    wait_phase,
)
from tests.e2e.test_recovery import worker_token

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
    greedy = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "greedy"},
              "spec": {"nodeSelector": {"example.com/nowhere": "true"}, "containers": [{
                  "name": "c", "image": "example.com/c:1", "resources": {
                      "requests": {"aws.amazon.com/neuron": "1000"},
                      "limits": {"aws.amazon.com/neuron": "1000"}}}]}}
    apply(crds, greedy, namespace)
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
