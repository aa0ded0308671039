"""What a probe run proves: only the accelerators it exercised (health.probing), from the
probe command's own output to the group's decision."""

from __future__ import annotations

import importlib.util
import json

import pytest

from goodput_operator.api.reports import ProbeReport
from goodput_operator.decide import decide_groups
from goodput_operator.health.probing import Inconclusive, accelerator_kind, inconclusive
from goodput_operator.health.quarantine import SDC
from goodput_operator.probe.__main__ import main
from goodput_operator.resources.probe import expects, probe_job
from tests.unit.world import NOW, conditions, group_spec, nodes, quarantined, world

pytestmark = pytest.mark.unit
NO_TORCH = importlib.util.find_spec("torch") is None


@pytest.mark.parametrize(("resource", "kind"), [
    ("nvidia.com/gpu", "cuda"), ("nvidia.com/mig-3g.40gb", "cuda"),
    ("aws.amazon.com/neuron", "neuron"), ("aws.amazon.com/neuroncore", "neuron"),
    ("aws.amazon.com/neurondevice", "neuron"), ("example.com/fpga", "cpu"),
])
def test_the_kind_of_device_follows_the_resource(resource: str, kind: str) -> None:
    assert accelerator_kind(resource) == kind


@pytest.mark.parametrize(("expects_", "backend", "devices", "needed", "proves"), [
    ("cuda", "torch", 8, 8, True),
    ("cuda", "numpy", 2, 8, False),       # the default image on a GPU node: the CPU only
    ("cuda", "torch", 7, 8, False),       # one GPU never ran the chain
    ("cuda", "", 0, 8, False),            # an older probe that does not say
    ("neuron", "neuron", 1, 0, True),
    ("neuron", "numpy", 2, 0, False),
    ("neuron", "torch", 8, 0, False),     # CUDA products say nothing of a Neuron device
    ("cpu", "numpy", 2, 0, True),
])
def test_a_run_proves_something_only_on_the_devices_it_exercised(
        expects_: str, backend: str, devices: int, needed: int, proves: bool) -> None:
    why = inconclusive(expects_, backend, devices, needed)  # type: ignore[arg-type]
    assert (why is None) is proves
    if why and backend != "torch":
        assert "spec.probes.image" in why


@pytest.mark.skipif(not NO_TORCH, reason="torch is installed: the CUDA path would run")
def test_a_cpu_probe_run_on_a_gpu_node_leaves_an_sdc_suspect_quarantined(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The default image on a GPU node: the probe is told cuda, cannot reach it, runs on
    the CPU and says so (exit 3); the operator reads it as inconclusive, the suspect keeps
    its quarantine and its clean count, and the same image is not run on it again."""
    job = probe_job("us0-n0", 3, "goodput-system", "goodput:dev", "http://op:8081",
                    "nvidia.com/gpu", 8, "suspicion")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-2:] == ["--expect", "cuda"]
    told_to = [a for a in command[3:] if a != "--report"]  # what the Job runs, kept local
    assert main([*told_to, "--node", "us0-n0", "--json", "--size", "64"]) == 3
    report = ProbeReport.model_validate(json.loads(capsys.readouterr().out))
    assert report.ok and report.backend == "numpy"   # clean, on the wrong device
    assert "could not exercise cuda devices with torch" in report.message
    told = expects(job["spec"]["template"]["metadata"]["annotations"])
    assert told == ("cuda", 8)
    why = inconclusive(told[0], report.backend, len(report.devices), told[1])
    assert why is not None and "torch built for CUDA" in why

    suspect = {**nodes(), "us0-n0": quarantined(nodes()["us0-n0"], SDC, NOW - 300)}
    snapshot = world(suspect, spec=group_spec(accelerator={"resource": "nvidia.com/gpu",
                                                           "perNode": 8}),
                     probe_runs={"us0-n0": 3}, clean_probes={"us0-n0": 2},
                     probe_image="goodput:dev",
                     inconclusive={"us0-n0": Inconclusive("goodput:dev", why)})
    [decision] = decide_groups(snapshot, [])
    assert decision.release == [] and decision.probes == []
    assert conditions(decision.desired)["ProbesInconclusive"] == ("True",
                                                                  "AcceleratorNotExercised")
    assert "us0-n0" in next(c["message"] for c in decision.desired["conditions"]
                            if c["type"] == "ProbesInconclusive")


@pytest.mark.skipif(not NO_TORCH, reason="torch is installed")
def test_without_an_expectation_a_probe_that_cannot_run_its_backend_fails_as_before() -> None:
    assert main(["--backend", "torch", "--size", "64"]) == 2
    assert main(["--expect", "cpu", "--size", "64"]) == 0
