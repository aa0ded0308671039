"""JobSet as a peer (sandbox/jobset.py, bench/control_loop.py): what its manager and its
webhooks are given, and the JobSet the launch benchmark submits (no JobSet runs here: the
benchmark itself needs the sandbox)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from bench import control_loop

from goodput_operator.sandbox import build, jobset
from goodput_operator.sandbox.versions import JOBSET_COMPONENT
from tests.unit.test_peers import schema_keys

pytestmark = pytest.mark.unit

MANIFESTS = """\
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- clientConfig: {service: {name: webhook-service, namespace: system,
                           path: /mutate-jobset-x-k8s-io-v1alpha2-jobset}}
  name: mjobset.kb.io
  rules: [{apiGroups: [jobset.x-k8s.io], resources: [jobsets]}]
- clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
  name: mpod.kb.io
  rules: [{apiGroups: [""], resources: [pods]}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validating-webhook-configuration}
webhooks:
- clientConfig: {service: {name: webhook-service, namespace: system, path: /validate--v1-pod}}
  name: vpod.kb.io
  rules: [{apiGroups: [""], resources: [pods]}]
"""


def test_jobsets_webhooks_point_at_its_process_and_see_only_a_jobsets_pods() -> None:
    mutating, validating = jobset.webhook_configurations(MANIFESTS, 9443, b"CA")
    [for_jobsets, for_pods] = mutating["webhooks"]
    assert for_jobsets["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-jobset-x-k8s-io-v1alpha2-jobset",
        "caBundle": "Q0E="}
    assert "objectSelector" not in for_jobsets
    only_theirs = {"matchExpressions": [{"key": jobset.JOBSET_NAME, "operator": "Exists"}]}
    assert for_pods["objectSelector"] == only_theirs
    assert validating["webhooks"][0]["objectSelector"] == only_theirs
    assert {mutating["metadata"]["name"], validating["metadata"]["name"]} == {
        "goodput-jobset-mutating", "goodput-jobset-validating"}


def test_jobsets_manager_serves_on_loopback_without_leader_election() -> None:
    config = jobset.configuration({"health": 1, "metrics": 2, "webhook": 3}, Path("/c"))
    assert config["webhook"] == {"host": "127.0.0.1", "port": 3, "certDir": "/c"}
    assert config["metrics"]["bindAddress"] == "127.0.0.1:2"
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"] == {"enable": False}


def test_the_launch_benchmarks_jobset_runs_the_indexed_jobs_pods() -> None:
    body = control_loop.jobset("g", 256)
    [replicated] = body["spec"]["replicatedJobs"]
    assert replicated["replicas"] == 1
    assert replicated["template"]["spec"] == control_loop.indexed_job("g", 256)["spec"]


def test_the_launch_table_gives_ours_against_each_peer() -> None:
    row = control_loop.row_of(256, {"ours": [5.0, 6.0, 7.0], "jobset": [4.0, 5.0, 6.0],
                                    "baseline": [3.0, 4.0, 4.0]})
    assert (row["ours_s"], row["jobset_s"], row["baseline_s"]) == (6.0, 5.0, 4.0)
    assert (row["ratio_jobset"], row["ratio_baseline"]) == (1.2, 1.5)
    lines = control_loop.table([row], control_loop.KINDS).splitlines()
    assert lines[2] == "| 256 | 6.0 | 5.0 | 4.0 | 1.2 | 1.5 |"


def unknown_to_jobset(spec: dict[str, Any]) -> list[str]:
    """The fields of a JobSet's SPEC its CRD (v1alpha2, from the built module) does not
    know; the test skips where JobSet was never built."""
    if not build.is_built(JOBSET_COMPONENT):
        pytest.skip("JobSet not built here")
    bases = build.module_dir(JOBSET_COMPONENT) / "config" / "components" / "crd" / "bases"
    crd = yaml.safe_load((bases / "jobset.x-k8s.io_jobsets.yaml").read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    return schema_keys(version["schema"]["openAPIV3Schema"]["properties"]["spec"], spec,
                       "JobSet")


def test_every_field_given_to_jobset_is_one_its_crd_knows() -> None:
    assert unknown_to_jobset(control_loop.jobset("g", 4)["spec"]) == []
