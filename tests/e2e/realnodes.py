"""Real nodes for e2e tests: a sandbox of its own (fleet trn2, its first 5 nodes real: the
first UltraServer and one node of the second, plus 2 system nodes) so that no
simulated-fleet test's pod can land on a real node, and the operator as users run it: the
chart's Deployment from the image built from the Dockerfile (tests/e2e/incluster.py).

Every job trains the same deterministic model (seed, steps), so an interrupted and resumed
run must end with the parameters of the uninterrupted reference run, bit for bit.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from goodput_operator import __version__, names
from goodput_operator.sandbox import cluster as sandbox_cluster
from goodput_operator.sandbox import faults, hostnet, images, operator_image, realnode
from tests.conftest import Cluster, wait_for
from tests.e2e import incluster
from tests.e2e.conftest import (
    NO_SWEEPS,
    apply,
    free_port,
    get_job,
    job_pods,
    lift_quarantine,
    sandbox_cli,
)

SANDBOX = "goodput-real-test"
US0 = [f"trn2-00-{i}" for i in range(4)]
SPARE = "trn2-01-0"
STEPS = 60
TRAINER = "/opt/goodput/trainer/train.py"
RELEASE = "goodput-operator"
RELEASE_NAMESPACE = "goodput-system"
PROBES = "goodput-probes"
SD_READER = "prometheus"  # the ServiceAccount the tests' Prometheus reads /sd/serving as


@dataclass
class Real:
    cluster: Cluster
    box: sandbox_cluster.Sandbox
    operator: incluster.InClusterOperator
    group: str
    prometheus_url: str  # the operator's --prometheus-url: where a test's Prometheus listens


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
    holder = hostnet.proxy_holder()
    if holder:  # its Services would not route: kube-proxy's chains are host-wide
        pytest.skip(f"sandbox {holder!r} runs this host's one kube-proxy (with --operator "
                    "in-cluster the session sandbox has real nodes too); these tests run "
                    "in-cluster anyway in a plain run")
    operator_image.build_image(__version__)  # `make image`: system nodes import it as they start
    log = tmp_path_factory.mktemp("real-operator") / "operator.log"
    operator: incluster.InClusterOperator | None = None
    try:
        sandbox_cluster.up(box, "trn2", real_nodes=len(US0) + 1, system_nodes=2)
        cluster = Cluster(box.kubeconfig, is_sandbox=True, sandbox_name=SANDBOX)
        root = Path(__file__).resolve().parents[2]
        cluster.kubectl("apply", "--server-side", "-f", str(root / "crds"))
        sandbox_cluster.wait_established(box.kubeconfig, "crd/trainingjobs.goodput.dev",
                                         "crd/ultraservergroups.goodput.dev")
        cluster.kubectl("create", "namespace", PROBES)
        prometheus_url = f"http://{hostnet.host_ip()}:{free_port()}"
        operator = incluster.InClusterOperator(
            cluster, RELEASE, RELEASE_NAMESPACE,
            incluster.image_values(__version__) | {"probeNamespace": PROBES,
                                                   "dashboards": {"enabled": False},
                                                   "prometheusUrl": prometheus_url,
                                                   "serviceDiscovery": {"readers": [
                                                       {"name": SD_READER,
                                                        "namespace": RELEASE_NAMESPACE}]}},
            log)
        operator.install()
        group = yaml_doc(root / "examples" / "trn2" / "ultraservergroup-real.yaml")
        group["spec"]["probes"] = NO_SWEEPS
        apply(cluster, group)
        yield Real(cluster, box, operator, group["metadata"]["name"], prometheus_url)
    finally:
        if operator is not None:
            operator.save_logs()
            print(f"in-cluster operator logs: {log}")
        if request.session.testsfailed:
            print(f"control plane and cluster DNS logs: {save_sandbox_logs(box, log.parent)}")
        if not request.config.getoption("--keep-sandbox"):
            sandbox_cluster.down(box)


def save_sandbox_logs(box: sandbox_cluster.Sandbox, into: Path) -> Path:
    """The control plane's logs (kwokctl's), the cluster DNS's and kube-proxy's, and every
    event, copied before `down` deletes them: a failure on real nodes is often the
    cluster's, not the operator's (a name the DNS did not answer, an EndpointSlice that
    came late, a kubelet that killed or refused a worker)."""
    from goodput_operator.sandbox import build

    kept = into / "sandbox-logs"
    logs = build.cache_root() / "kwok" / "clusters" / box.name / "logs"
    if logs.is_dir():
        shutil.copytree(logs, kept / "control-plane", dirs_exist_ok=True)
    for name in ("coredns.log", "kube-proxy.log"):
        found = box.home / "real" / name
        if found.is_file():
            kept.mkdir(parents=True, exist_ok=True)
            shutil.copy2(found, kept / name)
    # the events outlive the pods a restart deleted: kubelets' kills, admissions refused,
    # OOM kills, probes, the operator's own Interrupted and SdcSuspected
    kept.mkdir(parents=True, exist_ok=True)
    (kept / "events.txt").write_text(events(box.kubeconfig, "-A"))
    return kept


def yaml_doc(path: Path) -> dict[str, Any]:
    import yaml

    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def probes_running(real: Real) -> list[str]:
    """The probe pods still holding a node's devices (Pending or Running)."""
    listed = json.loads(real.cluster.kubectl("get", "pods", "-n", PROBES, "-o",
                                             "json").stdout)
    return [f"{p['metadata']['name']} on {p['spec'].get('nodeName')}" for p in listed["items"]
            if (p.get("status") or {}).get("phase") in ("Pending", "Running")]


@pytest.fixture
def ns(real: Real, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the test's own, on real nodes no earlier test's probe still holds:
    a suspect's probe (the SDC test's) would otherwise keep a node from the next gang.
    A test that fails leaves the operator's logs and the namespace's events as they were
    then (later tests replace the operator's pods: their logs at the module's end no
    longer hold what this test saw)."""
    wait_for(lambda: not probes_running(real), timeout=180, interval=1,
             what=f"the earlier tests' probes finished in {PROBES}")
    name = f"real-{uuid.uuid4().hex[:6]}"
    real.cluster.kubectl("create", "namespace", name)
    wait_for(lambda: real.cluster.kubectl("get", "sa", "default", "-n", name,
                                          check=False).returncode == 0, timeout=30)
    failed_before = request.session.testsfailed
    yield name
    if request.session.testsfailed > failed_before:
        keep_failure(real, name, request.node.name)
    real.cluster.kubectl("delete", "tj", "--all", "-n", name, "--wait=true", "--timeout=60s")
    real.cluster.kubectl("delete", "namespace", name, "--wait=false")


def keep_failure(real: Real, namespace: str, test: str) -> None:
    """The operator's logs (every replica, and what a restarted one said before) and the
    events of NAMESPACE, beside the module's operator log, as a failed TEST left them."""
    real.operator.save_logs(f"after {test} failed")
    (real.operator.log.parent / f"{test}.events.txt").write_text(
        events(real.cluster.kubeconfig, "-n", namespace))


def events(kubeconfig: Path, *where: str) -> str:
    """`kubectl get events WHERE` (-A, or -n NAMESPACE), oldest first, or why it failed."""
    proc = sandbox_cluster.run_kubectl(kubeconfig, "get", "events", *where, "-o", "wide",
                                       "--sort-by=.lastTimestamp")
    return proc.stdout + proc.stderr


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
        raise AssertionError(f"{name} failed: {job['status'].get('message')}; "
                             f"{pod_tails(real, namespace, name)}")
    return job


def pod_tails(real: Real, namespace: str, name: str, lines: int = 5) -> dict[str, str]:
    """The last LINES of each of job NAME's workers' logs: what a failure's message shows
    of the workers' side."""
    tails = {}
    for pod in job_pods(real.cluster, namespace, name):
        pod_name = pod["metadata"]["name"]
        tails[pod_name] = str(real.cluster.kubectl("logs", pod_name, "-n", namespace,
                                                   f"--tail={lines}", check=False).stdout)
    return tails


def nodes_taken(real: Real) -> dict[str, Any]:
    """What holds each real node now (a quarantine's evidence, the pods on it): what a
    placement that avoided a node was avoiding."""
    listed = json.loads(real.cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    pods = json.loads(real.cluster.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
    taken: dict[str, Any] = {}
    for node in listed:
        name = node["metadata"]["name"]
        here = [f"{p['metadata']['namespace']}/{p['metadata']['name']} "
                f"{(p.get('status') or {}).get('phase')}" for p in pods
                if (p.get("spec") or {}).get("nodeName") == name]
        held = (node["metadata"].get("annotations") or {}).get(names.EVIDENCE_ANNOTATION)
        if here or held:
            taken[name] = {"pods": here, "quarantine": held}
    return taken


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


def _running_at(real: Real, namespace: str, name: str, restarts: int) -> dict[str, Any] | None:
    job = get_job(real.cluster, namespace, name)
    status = job.get("status") or {}
    if status.get("restarts") == restarts and status.get("phase") in ("Running", "Succeeded"):
        return job
    return None


def sandbox(real: Real, *args: str) -> None:
    """`goodput sandbox VERB` on the real-node sandbox (add-real-node takes a while)."""
    sandbox_cli(real.cluster, *args, timeout=120)


def heal(real: Real, node: str) -> None:
    """The kubelet back; once the node lifecycle controller has lifted its unreachable
    taints (the operator counts them against the node), the quarantine too."""
    sandbox(real, "heal-node", node)
    faults.wait_recovered(real.box, node)
    lift_quarantine(real.cluster, node)
