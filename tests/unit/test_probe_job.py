"""The probe Job builder."""

from __future__ import annotations

import pytest

from goodput_operator import names
from goodput_operator.resources.probe import expects, probe_job, probe_job_name


def test_the_probe_job_is_pinned_tolerates_quarantine_and_reports_with_its_token() -> None:
    job = probe_job("trn2-00-1", 2, "goodput-system", "img:1", "http://op:8081",
                    "aws.amazon.com/neuron", 16, "suspicion")
    pod = job["spec"]["template"]["spec"]
    assert job["metadata"]["name"] == "probe-trn2-00-1-suspi2"
    assert pod["nodeName"] == "trn2-00-1" and pod["tolerations"] == [{"operator": "Exists"}]
    assert job["spec"]["template"]["metadata"]["annotations"] == {
        names.PROBE_NODE_ANNOTATION: "trn2-00-1", names.PROBE_EXPECTS_ANNOTATION: "neuron/0",
        names.PROBE_IMAGE_ANNOTATION: "img:1"}
    container = pod["containers"][0]
    assert container["command"][-3:] == ["--report", "--expect", "neuron"]
    assert container["resources"]["limits"] == {"aws.amazon.com/neuron": "16"}
    assert pod["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"][
        "audience"] == names.REPORT_AUDIENCE


def test_probe_job_names_fit_dns_labels() -> None:
    name = probe_job_name("ip-10-1-2-3.us-west-2.compute.internal" * 3, 12)
    assert len(name) <= 63 and name.endswith("-12") and "." not in name


def test_over_https_the_probe_mounts_the_ca_the_operator_keeps_in_its_namespace() -> None:
    plain = probe_job("n1", 0, "goodput-system", "img:1", "http://op:8081",
                      "aws.amazon.com/neuron", 16, "start")
    secure = probe_job("n1", 0, "goodput-system", "img:1", "https://op:8081",
                       "aws.amazon.com/neuron", 16, "start")
    env_plain = {e["name"] for e in plain["spec"]["template"]["spec"]["containers"][0]["env"]}
    pod = secure["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert names.ENV_REPORT_CA not in env_plain
    assert env[names.ENV_REPORT_CA] == "/etc/goodput/report-ca.crt"
    assert {"name": "goodput-report-ca",
            "configMap": {"name": "goodput-report-ca", "optional": True}} in pod["volumes"]


@pytest.mark.parametrize(
    ("resource", "count", "annotation", "told"),
    [
        ("nvidia.com/gpu", 8, "cuda/8", ("cuda", 8)),          # every GPU must be reached
        ("nvidia.com/mig-1g.10gb", 7, "cuda/7", ("cuda", 7)),
        ("aws.amazon.com/neuron", 16, "neuron/0", ("neuron", 0)),
        ("aws.amazon.com/neuroncore", 128, "neuron/0", ("neuron", 0)),
        ("example.com/fpga", 2, "cpu/0", ("cpu", 0)),
    ],
)
def test_the_probe_is_told_to_exercise_the_nodes_kind_of_accelerator(
        resource: str, count: int, annotation: str, told: tuple[str, int]) -> None:
    job = probe_job("n1", 0, "goodput-system", "img:1", "http://op:8081", resource, count,
                    "suspicion")
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations[names.PROBE_EXPECTS_ANNOTATION] == annotation
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-1] == told[0]
    assert expects(annotations) == told


def test_a_probe_pod_of_an_older_operator_is_told_nothing() -> None:
    assert expects({names.PROBE_NODE_ANNOTATION: "n1"}) is None
    assert expects({names.PROBE_EXPECTS_ANNOTATION: "tpu/4"}) is None
