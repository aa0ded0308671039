"""Real workers on real nodes: kubelets, containerd and runc beside the simulated fleet run
the example PyTorch trainer (examples/trainer/train.py) from the sandbox's worker image.

A sandbox of its own (fleet trn2, its first 5 nodes real: the first UltraServer and one
node of the second) so that no simulated-fleet test's pod can land on a real node. Every
job trains the same deterministic model (seed, steps), so an interrupted and resumed run
must end with the parameters of the uninterrupted reference run, bit for bit.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from goodput_operator.sandbox import cluster as sandbox_cluster
from goodput_operator.sandbox import faults, hostnet, images, realnode
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import Operator, apply, get_job, job_pods

pytestmark = pytest.mark.e2e
SANDBOX = "goodput-real-test"
US0 = [f"trn2-00-{i}" for i in range(4)]
SPARE = "trn2-01-0"
STEPS = 60
TRAINER = "/opt/goodput/trainer/train.py"


@dataclass
class Real:
    cluster: Cluster
    box: sandbox_cluster.Sandbox
    operator: Operator
    group: str


@pytest.fixture(scope="module")
def real(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Real]:
    if request.config.getoption("--kubeconfig"):
        pytest.skip("real nodes join the goodput sandbox, not an external --kubeconfig")
    reason = hostnet.unavailable_reason()
    if reason:
        pytest.skip(f"no real nodes on this machine: {reason}")
    box = sandbox_cluster.Sandbox(SANDBOX)
    sandbox_cluster.down(box)
    sandbox_cluster.up(box, "trn2", real_nodes=len(US0) + 1)
    cluster = Cluster(box.kubeconfig, is_sandbox=True, sandbox_name=SANDBOX)
    root = Path(__file__).resolve().parents[2]
    cluster.kubectl("apply", "--server-side", "-f", str(root / "crds"))
    cluster.kubectl("wait", "--for", "condition=Established", "--timeout=60s",
                    "crd/trainingjobs.goodput.dev", "crd/ultraservergroups.goodput.dev")
    log = tmp_path_factory.mktemp("real-operator") / "operator.log"
    operator = Operator(cluster, log)
    # workers reach the operator at the host's address, as pods reach a Service elsewhere
    operator.report_url = f"http://{hostnet.host_ip()}:{operator.report_port}"
    # the SDC probe Jobs run from the worker image: real nodes have no operator image
    operator.extra_args = ("--report-url", operator.report_url,
                           "--probe-image", images.WORKER_IMAGE)
    operator.start()
    group = yaml_doc(root / "examples" / "trn2" / "ultraservergroup-real.yaml")
    apply(cluster, group)
    try:
        yield Real(cluster, box, operator, group["metadata"]["name"])
    finally:
        operator.stop()
        print(f"real-node operator log: {log}")
        if not request.config.getoption("--keep-sandbox"):
            sandbox_cluster.down(box)


def yaml_doc(path: Path) -> dict[str, Any]:
    import yaml

    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


@pytest.fixture
def ns(real: Real) -> Iterator[str]:
    name = f"real-{uuid.uuid4().hex[:6]}"
    real.cluster.kubectl("create", "namespace", name)
    wait_for(lambda: real.cluster.kubectl("get", "sa", "default", "-n", name,
                                          check=False).returncode == 0, timeout=30)
    yield name
    real.cluster.kubectl("delete", "tj", "--all", "-n", name, "--wait=true", "--timeout=60s")
    real.cluster.kubectl("delete", "namespace", name, "--wait=false")


def trainer_job(real: Real, name: str, *args: str, **spec: Any) -> dict[str, Any]:
    """The example TrainingJob (examples/trn2/trainingjob-trainer.yaml), renamed, with its
    own checkpoint directory and the trainer's arguments."""
    root = Path(__file__).resolve().parents[2]
    job = yaml_doc(root / "examples" / "trn2" / "trainingjob-trainer.yaml")
    job["metadata"]["name"] = name
    job["spec"]["ultraServerGroup"] = real.group
    job["spec"]["checkpoint"]["dir"] = f"/shared/checkpoints/{name}"
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == images.WORKER_IMAGE
    container["args"] = ["--steps", str(STEPS), "--checkpoint-every", "10", *args]
    job["spec"].update(spec)
    return job


def results(name: str) -> dict[int, dict[str, Any]]:
    folder = realnode.SHARED_DIR / "checkpoints" / name / "final"
    return {int(p.stem.split("-")[1]): json.loads(p.read_text())
            for p in folder.glob("rank-*.json")}


def logs(real: Real, namespace: str, pod: str) -> str:
    return str(real.cluster.kubectl("logs", pod, "-n", namespace).stdout)


def succeeded(real: Real, namespace: str, name: str, timeout: float = 300) -> dict[str, Any]:
    """The job once it has finished; a failed one fails the test at once, with its workers'
    last log lines."""
    def finished() -> dict[str, Any] | None:
        job = get_job(real.cluster, namespace, name)
        return job if (job.get("status") or {}).get("phase") in ("Succeeded", "Failed") \
            else None
    job = wait_for(finished, timeout=timeout, what=f"{name} finished")
    if job["status"]["phase"] != "Succeeded":
        tails = {p["metadata"]["name"]: real.cluster.kubectl(
            "logs", p["metadata"]["name"], "-n", namespace, "--tail=5", check=False).stdout
            for p in job_pods(real.cluster, namespace, name)}
        raise AssertionError(f"{name} failed: {job['status'].get('message')}; {tails}")
    return job


@pytest.fixture(scope="module")
def reference(real: Real) -> Iterator[dict[str, Any]]:
    """The uninterrupted run every other run must end equal to."""
    namespace = f"real-ref-{uuid.uuid4().hex[:6]}"
    real.cluster.kubectl("create", "namespace", namespace)
    wait_for(lambda: real.cluster.kubectl("get", "sa", "default", "-n", namespace,
                                          check=False).returncode == 0, timeout=30)
    name = f"ref-{uuid.uuid4().hex[:6]}"
    apply(real.cluster, trainer_job(real, name), namespace)
    job = succeeded(real, namespace, name)
    pods = job_pods(real.cluster, namespace, name)
    yield {"job": job, "pods": pods, "results": results(name), "namespace": namespace,
           "trainer_log": logs(real, namespace, pods[0]["metadata"]["name"])}
    real.cluster.kubectl("delete", "namespace", namespace, "--wait=false")
    shutil.rmtree(realnode.SHARED_DIR / "checkpoints" / name, ignore_errors=True)


def test_a_real_job_trains_checkpoints_and_succeeds_with_its_ranks_in_agreement(
        real: Real, reference: dict[str, Any]) -> None:
    job, pods, final = reference["job"], reference["pods"], reference["results"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == US0, "one UltraServer, all 4 nodes"
    assert all(p["status"]["phase"] == "Succeeded" for p in pods)
    assert sorted(final) == [0, 1, 2, 3]
    assert len({r["fingerprint"] for r in final.values()}) == 1, final
    assert job["status"]["checkpoint"]["latest"]["step"] == STEPS
    latest = job["status"]["checkpoint"]["latest"]
    from goodput_operator.sdk import checkpoint

    assert latest["digest"] == checkpoint.digest(latest["path"].replace(
        "/shared", str(realnode.SHARED_DIR), 1)), "the committed digest is of what is on disk"
    assert f"checkpoint step {STEPS} committed" in reference["trainer_log"]
    assert f"FINAL step={STEPS}" in reference["trainer_log"]
    # every report arrived with the pod's own projected token (no token was minted here)
    from prometheus_client.parser import text_string_to_metric_families

    answered = {(s.labels["kind"], s.labels["code"]): s.value
                for family in text_string_to_metric_families(real.operator.metrics())
                for s in family.samples if s.name == "goodput_reports_total"}
    assert answered.get(("checkpoint", "200"), 0) >= STEPS // 10, answered
    assert answered.get(("step", "200"), 0) >= 4 * STEPS, answered
    assert not {code for _, code in answered if code != "200"}, answered


def token_claims(real: Real, namespace: str, pod: str) -> dict[str, Any]:
    token = real.cluster.kubectl("exec", pod, "-n", namespace, "--", "cat",
                                 "/var/run/secrets/goodput.dev/report/token").stdout.strip()
    payload = token.split(".")[1]
    padded = payload + "=" * (-len(payload) % 4)
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(padded))
    return claims


def test_silent_corruption_on_a_real_replica_rolls_back_to_the_verified_checkpoint(
        real: Real, reference: dict[str, Any], ns: str) -> None:
    name = f"sdc-{uuid.uuid4().hex[:6]}"
    bad = US0[1]
    apply(real.cluster, trainer_job(real, name, "--step-seconds", "0.5", "--corrupt-at-step",
                                    "25", "--corrupt-node", bad), ns)
    try:
        job = wait_for(lambda: _running_at(real, ns, name, 1), timeout=240,
                       what="the gang running again after the corruption")
        incident = job["status"]["incidents"][-1]
        assert incident["cause"] == "SilentDataCorruption" and bad in incident["nodes"]
        assert "rolling back to step 20" in incident["message"], incident["message"]
        assert bad not in {r["node"] for r in job["status"]["placement"]["ranks"]}
        succeeded(real, ns, name)
    finally:
        release(real, bad)
    pods = job_pods(real.cluster, ns, name)
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["GOODPUT_RESUME_STEP"] == "20"
    assert "resumed from step 20" in logs(real, ns, pods[0]["metadata"]["name"])
    final = results(name)
    assert {r["fingerprint"] for r in final.values()} == \
        {reference["results"][0]["fingerprint"]}, "the replay from step 20 is clean"


def test_a_real_node_failure_resumes_from_the_last_committed_checkpoint_on_the_spare(
        real: Real, reference: dict[str, Any], ns: str) -> None:
    name = f"fail-{uuid.uuid4().hex[:6]}"
    apply(real.cluster, trainer_job(real, name, "--step-seconds", "2"), ns)
    committed = wait_for(lambda: (get_job(real.cluster, ns, name).get("status") or {})
                         .get("checkpoint", {}).get("latest"), timeout=180,
                         what="a first committed checkpoint")
    ranks = {r["rank"]: r["node"] for r in
             get_job(real.cluster, ns, name)["status"]["placement"]["ranks"]}
    victim = ranks[2]
    pod = next(p for p in job_pods(real.cluster, ns, name)
               if p["metadata"]["labels"]["goodput.dev/rank"] == "2")
    claims = token_claims(real, ns, pod["metadata"]["name"])
    assert claims["aud"] == ["goodput.dev/report"]
    assert claims["kubernetes.io"]["pod"]["name"] == pod["metadata"]["name"]
    assert claims["kubernetes.io"]["node"]["name"] == victim, "minted for the real kubelet"
    sandbox(real, "fail-node", victim)
    try:
        job = wait_for(lambda: _running_at(real, ns, name, 1), timeout=240,
                       what="the gang running again after the node failure")
        moved = {r["rank"]: r["node"] for r in job["status"]["placement"]["ranks"]}
        assert moved[2] == SPARE and {k: v for k, v in moved.items() if k != 2} == \
            {k: v for k, v in ranks.items() if k != 2}
        incident = job["status"]["incidents"][-1]
        assert incident["cause"] == "NodeFailure" and victim in incident["nodes"]
        node = json.loads(real.cluster.kubectl("get", "node", victim, "-o", "json").stdout)
        assert any(t["key"] == "goodput.dev/quarantine" for t in node["spec"].get("taints", []))
        done = succeeded(real, ns, name)
    finally:
        heal(real, victim)
    resumed = int(next(e["value"] for e in job_pods(real.cluster, ns, name)[0]["spec"]
                       ["containers"][0]["env"] if e["name"] == "GOODPUT_RESUME_STEP"))
    assert resumed >= committed["step"], "resumed from the newest committed checkpoint"
    pods = job_pods(real.cluster, ns, name)
    assert all(p["metadata"]["labels"]["goodput.dev/restart"] == "1" for p in pods)
    assert f"resumed from step {resumed}" in logs(real, ns, pods[0]["metadata"]["name"])
    final = results(name)
    assert {r["resumedFrom"] for r in final.values()} == {resumed}
    assert {r["fingerprint"] for r in final.values()} == \
        {reference["results"][0]["fingerprint"]}, "equal to the uninterrupted run, bit for bit"
    assert done["status"]["incidents"][-1].get("detectionSeconds") is not None


def _running_at(real: Real, namespace: str, name: str, restarts: int) -> dict[str, Any] | None:
    job = get_job(real.cluster, namespace, name)
    status = job.get("status") or {}
    if status.get("restarts") == restarts and status.get("phase") in ("Running", "Succeeded"):
        return job
    return None


def sandbox(real: Real, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "goodput_operator.cli", "sandbox", *args, "--name",
                    SANDBOX], check=True, capture_output=True, text=True, timeout=120)


def heal(real: Real, node: str) -> None:
    """The kubelet back; once the node lifecycle controller has lifted its unreachable
    taints (the operator counts them against the node), the quarantine too."""
    sandbox(real, "heal-node", node)
    faults.wait_recovered(real.box, node)
    release(real, node)


def release(real: Real, node: str) -> None:
    real.cluster.kubectl("taint", "node", node, "goodput.dev/quarantine-", check=False)
    real.cluster.kubectl("label", "node", node, "goodput.dev/quarantined-")
    real.cluster.kubectl("annotate", "node", node, "goodput.dev/lemon-score-",
                         "goodput.dev/quarantine-evidence-")


def test_a_node_made_real_later_runs_containers_and_a_crash_kills_them(
        real: Real, ns: str) -> None:
    """`add-real-node` turns the next simulated node real; `fail-node --crash` kills every
    container on it (exit 137) while the node itself stays Ready."""
    sandbox(real, "add-real-node", "trn2-01-1")
    node = json.loads(real.cluster.kubectl("get", "node", "trn2-01-1", "-o", "json").stdout)
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert node["status"]["allocatable"]["aws.amazon.com/neuron"] == "16"
    assert node["metadata"]["labels"][realnode.REAL_LABEL] == "true"
    apply(real.cluster, {"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": "sleeper", "namespace": ns},
                         "spec": {"nodeName": "trn2-01-1", "restartPolicy": "Never",
                                  "containers": [{"name": "c", "image": images.WORKER_IMAGE,
                                                  "imagePullPolicy": "Never",
                                                  "command": ["sleep", "600"]}]}})

    def phase() -> str:
        return str(real.cluster.kubectl("get", "pod", "sleeper", "-n", ns, "-o",
                                        "jsonpath={.status.phase}").stdout)
    wait_for(lambda: phase() == "Running", timeout=60, what="the pod running")
    sandbox(real, "fail-node", "--crash", "trn2-01-1")
    wait_for(lambda: phase() == "Failed", timeout=60, what="the pod failed by the crash")
    code = real.cluster.kubectl("get", "pod", "sleeper", "-n", ns, "-o", "jsonpath="
                                "{.status.containerStatuses[0].state.terminated.exitCode}").stdout
    assert code == "137"
    assert faults.recovered(json.loads(real.cluster.kubectl(
        "get", "node", "trn2-01-1", "-o", "json").stdout)), "a crash is not a partition"
