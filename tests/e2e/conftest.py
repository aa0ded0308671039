"""e2e harness: the CRDs, the operator as a real process, groups and jobs per test."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from goodput_operator import names
from goodput_operator.resources.pods import index_of
from goodput_operator.sandbox.fleet import FLEET_LABEL
from tests import helm
from tests.conftest import Cluster, http_get, in_cluster, wait_for

_handed_out: set[int] = set()


def free_port() -> int:
    """A free port never handed out before in this session: operators are given their ports
    before they bind them, so two of them must not be offered the same one."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


class Operator:
    """`goodput-operator` as a subprocess; restartable; its log kept for failures."""

    def __init__(self, cluster: Cluster, log: Path, kubeconfig: Path | None = None,
                 extra_args: tuple[str, ...] = ()) -> None:
        self.cluster = cluster
        self.log = log
        self.kubeconfig = kubeconfig or cluster.kubeconfig  # whose credentials it acts with
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None
        self.health_port = free_port()
        self.metrics_port = free_port()
        self.report_port = free_port()
        self.probe_namespace = "goodput-probes"
        self.report_url = f"http://127.0.0.1:{self.report_port}"

    def start(self) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        self.cluster.kubectl("create", "namespace", self.probe_namespace, check=False)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "goodput_operator.operator.main",
                 "--health-port", str(self.health_port),
                 "--metrics-port", str(self.metrics_port),
                 "--report-port", str(self.report_port),
                 "--probe-namespace", self.probe_namespace,
                 "--prometheus-allow", "http://127.0.0.1",  # the tests' Prometheus (any port)
                 *self.extra_args],
                env=env, stdout=out, stderr=subprocess.STDOUT)
        wait_for(self.healthy, timeout=60, what="operator /healthz")

    def healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"operator exited with {self.proc.returncode}; "
                                 f"log: {self.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz",
                                        timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def readiness(self) -> dict[str, Any]:
        """/readyz's answer (ok, reason, leader), whatever its status code."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz",
                                        timeout=5) as response:
                return dict(json.loads(response.read()))
        except urllib.error.HTTPError as err:
            return dict(json.loads(err.read()))

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=5) as response:
            return str(response.read().decode())

    def health_get(self, path: str, token: str | None = None) -> tuple[int, bytes]:
        """GET PATH on the health port (status, body), with TOKEN as a bearer if given."""
        return http_get(f"http://127.0.0.1:{self.health_port}{path}", token)

    def resident_mib(self) -> float:
        """The operator's resident memory, from the kernel."""
        assert self.proc is not None
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines()
                        if line.startswith("VmRSS:"))) / 1024

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None


CHART_RELEASE = "goodput-e2e"  # installed once per session; its namespace holds the Lease
CHART_NAMESPACE = "goodput-e2e"
SD_READER = "sd-reader"  # the ServiceAccount the chart grants /sd/serving (test_tenancy)
CHART_VALUES = {"replicaCount": 0, "probeNamespace": "goodput-probes",
                "dashboards": {"enabled": False},
                "serviceDiscovery": {"readers": [{"name": SD_READER,
                                                  "namespace": CHART_NAMESPACE}]}}


@contextlib.contextmanager
def scoped_operator(e2e: Operator, crds: Cluster, namespace: str, kubeconfig: Path,
                    log: Path) -> Iterator[tuple[Operator, str]]:
    """The session's operator stopped and one acting only in NAMESPACE in its place, with
    another namespace beside it (deleted afterwards); the session's comes back after.
    The scoped one is started by the caller, once the scene is set."""
    elsewhere = f"{namespace[:50]}-other"
    crds.kubectl("create", "namespace", elsewhere)
    scoped = Operator(crds, log, kubeconfig, ("--namespace", namespace))
    e2e.stop()
    try:
        yield scoped, elsewhere
    finally:
        scoped.stop()
        crds.kubectl("delete", "namespace", elsewhere, "--wait=false", check=False)
        e2e.start()


LATE_MODULES = ("test_multicluster.py",)
"""e2e modules that run after the others: they need Kueue, which `make test` builds last
(minutes on a cold machine), beside the tests that need no Kueue."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Integration tests run before every e2e test, whatever order the command line named
    them in: the e2e operator (session-wide, once started) would reconcile their objects.
    The LATE_MODULES come after the other e2e tests. The RBAC audit reads what every other
    e2e test made the operator do: it runs last."""
    items.sort(key=lambda item: ("e2e" in item.path.parts,
                                 item.name.startswith("test_chart_rbac"),
                                 item.path.name in LATE_MODULES))


@pytest.fixture(scope="session")
def chart_kubeconfig(crds: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart installed (no replicas: the operator runs here, as a process) and a
    kubeconfig holding a token of the chart's ServiceAccount. Every e2e test runs the
    operator with it, so a verb missing from the chart's RBAC fails a scenario, and one
    the operator never uses fails test_chart_rbac.py."""
    return chart_account(crds, tmp_path_factory.mktemp("chart") / "kubeconfig")


def chart_account(cluster: Cluster, kubeconfig: Path) -> Path:
    """The chart installed in CLUSTER (no replicas) and KUBECONFIG written with a token of
    its ServiceAccount: an operator run with it has the chart's RBAC and nothing more."""
    cluster.kubectl("create", "namespace", "goodput-probes", check=False)
    helm.install(cluster.kubeconfig, CHART_RELEASE, CHART_NAMESPACE, **CHART_VALUES)
    token = cluster.kubectl("create", "token", helm.account_name(CHART_RELEASE), "-n",
                            CHART_NAMESPACE, "--duration=6h").stdout.strip()
    return helm.service_account_kubeconfig(cluster.kubeconfig, token, kubeconfig)


CHART_ACCOUNT = f"system:serviceaccount:{CHART_NAMESPACE}:{helm.account_name(CHART_RELEASE)}"


@dataclass
class Audited:
    """What the chart's ServiceAccount did in sandboxes that tests start and delete
    themselves (their audit logs go with them): read before they go, for
    test_chart_rbac.py."""

    used: set[helm.Permission] = field(default_factory=set)
    refused: list[str] = field(default_factory=list)

    def read(self, audit_log: Path) -> None:
        used, refused = helm.audited(audit_log, CHART_ACCOUNT)
        self.used |= used
        self.refused += refused

    def load(self, saved: Path) -> str | None:
        """Add what another lane's operator did (saved by save_audit); the reason it holds
        nothing when that lane wrote no audit."""
        found = json.loads(saved.read_text())
        if "absent" in found:
            return str(found["absent"])
        self.used |= {cast(helm.Permission, tuple(use)) for use in found["used"]}
        self.refused += found["refused"]
        return None


def save_audit(cluster: Cluster) -> None:
    """In `make test`, what the chart's ServiceAccount did in this lane's session sandbox,
    for the RBAC audit that another lane runs (tests/lanes.py: GOODPUT_TEST_AUDIT_OUT).
    Written once the operator has stopped, whole or not at all (the reader polls for it)."""
    out = os.environ.get("GOODPUT_TEST_AUDIT_OUT")
    if not out or not cluster.sandbox_name:
        return
    from goodput_operator.sandbox.cluster import Sandbox

    audited = Audited()
    audited.read(Sandbox(cluster.sandbox_name).audit_log)
    partial = Path(out + ".partial")
    partial.write_text(json.dumps({"used": sorted(audited.used), "refused": audited.refused}))
    partial.rename(out)


@pytest.fixture(scope="session")
def audited_elsewhere() -> Audited:
    return Audited()


@pytest.fixture(scope="session")
def operator(request: pytest.FixtureRequest, crds: Cluster, chart_kubeconfig: Path,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    if in_cluster(request.config):
        deployed = InClusterOperator(crds, CHART_RELEASE, CHART_NAMESPACE,
                                     CHART_VALUES | in_cluster_values(crds), log)
        deployed.install()
        yield cast(Operator, deployed)  # answers what the tests ask of an Operator
        deployed.save_logs()
        save_audit(crds)
        print(f"in-cluster operator logs: {log}")
        return
    running = Operator(crds, log, chart_kubeconfig)
    running.start()
    yield running
    running.stop()
    save_audit(crds)
    print(f"operator log: {log}")


def in_cluster_values(cluster: Cluster) -> dict[str, Any]:
    """The sandbox: the image built by `make image`, on the system nodes. Another cluster:
    the image $GOODPUT_E2E_IMAGE names (e.g. loaded with `kind load docker-image`)."""
    if cluster.is_sandbox:
        from goodput_operator import __version__
        from goodput_operator.sandbox import hostnet

        # the tests' Prometheus runs on the host (metrics_source)
        return {**image_values(__version__),
                "prometheusAllow": [f"http://{hostnet.host_ip()}"]}
    if cluster.kind_name:  # `--kind`
        return kind_values()
    image = os.environ.get("GOODPUT_E2E_IMAGE")
    if not image or ":" not in image:
        pytest.fail("--operator in-cluster with --kubeconfig needs GOODPUT_E2E_IMAGE=REPO:TAG, "
                    "an operator image the cluster can run (docs/testing.md)")
    repository, tag = image.rsplit(":", 1)
    return {"replicaCount": 2, "image": {"repository": repository, "tag": tag,
                                         "pullPolicy": "IfNotPresent"}}


def apply(cluster: Cluster, doc: dict[str, Any], namespace: str | None = None) -> None:
    args = ["apply", "--server-side", "-f", "-"] + (["-n", namespace] if namespace else [])
    cluster.kubectl(*args, input_text=json.dumps(doc))


@pytest.fixture
def trn2_group(crds: Cluster) -> Iterator[str]:
    """An UltraServerGroup over the session fleet's Trn2 UltraServers, without spares."""
    wait_trn2_free(crds)
    name = f"trn2-{uuid.uuid4().hex[:6]}"
    apply(crds, {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
                 "metadata": {"name": name}, "spec": trn2_group_spec()})
    yield name
    crds.kubectl("delete", "usg", name, "--ignore-not-found")


def training_job(name: str, group: str, workers: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "goodput.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {"ultraServerGroup": group, "workers": workers, "acceleratorsPerWorker": 16,
                 "template": {"spec": {"containers": [{"name": "trainer",
                                                       "image": "example.com/train:1"}]}},
                 **spec},
    }


def get_object(cluster: Cluster, kind: str, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(cluster.kubectl("get", kind, name, "-n", namespace,
                                                        "-o", "json").stdout)
    return result


def get_job(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return get_object(cluster, "tj", namespace, name)


def job_pods(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(cluster.kubectl(
        "get", "pods", "-n", namespace, "-l", f"{names.JOB_LABEL}={name}", "-o", "json",
    ).stdout)["items"]
    return sorted((p for p in items if index_of(p) >= 0), key=index_of)  # its ranks only


def wait_phase(cluster: Cluster, namespace: str, name: str, phase: str,
               timeout: float = 60) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        job = get_job(cluster, namespace, name)
        return job if (job.get("status") or {}).get("phase") == phase else None
    try:
        return wait_for(reached, timeout=timeout, what=f"{name} {phase}")
    except AssertionError as err:
        status = get_job(cluster, namespace, name).get("status")
        raise AssertionError(f"{err}; status: {json.dumps(status)}") from None


@pytest.fixture
def jobs_cleanup(crds: Cluster, namespace: str) -> Iterator[None]:
    """Delete the test's jobs and wait until their pods are gone, freeing the nodes."""
    yield
    delete_all(crds, "tj", namespace)


def delete_all(cluster: Cluster, kind: str, namespace: str) -> None:
    """Delete every KIND in NAMESPACE and wait until their pods are gone (nodes free)."""
    cluster.kubectl("delete", kind, "--all", "-n", namespace, "--wait=true", "--timeout=60s")
    wait_for(lambda: not json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o",
                                                    "json").stdout)["items"],
             timeout=60, what=f"pods of {namespace} gone")


@pytest.fixture
def e2e(operator: Operator, jobs_cleanup: None) -> Operator:
    return operator


def counter(operator: Operator, series: str, **labels: str) -> float:
    """A series' value on the operator's /metrics (0 when absent)."""
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    for line in operator.metrics().splitlines():
        name, _, rest = line.partition("{") if "{" in line else line.partition(" ")
        if name == series and all(label in rest for label in wanted):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def settle(operator: Operator, passes: int = 2) -> None:
    """For asserting that something does NOT happen: wait until the operator has finished
    PASSES more reconcile passes (the first may have begun before the test's change; the
    others began after it), each of which would have done it. No fixed sleep."""
    done = counter(operator, "goodput_reconcile_pass_seconds_count")
    wait_for(lambda: counter(operator, "goodput_reconcile_pass_seconds_count")
             >= done + passes, timeout=60, what=f"{passes} more operator passes")


def settle_autoscaler(operator: Operator, namespace: str, name: str, evaluations: int = 2
                      ) -> None:
    """Wait until the autoscaler has evaluated NAME EVALUATIONS more times (it has seen
    what the test changed), then for the passes that write what it decided."""
    series = "goodput_autoscaler_evaluations_total"
    done = counter(operator, series, namespace=namespace, inferenceendpoint=name)
    wait_for(lambda: counter(operator, series, namespace=namespace, inferenceendpoint=name)
             >= done + evaluations, timeout=60, what=f"{evaluations} autoscaler evaluations")
    settle(operator)


def sandbox_cli(cluster: Cluster, *args: str, timeout: float = 60
                ) -> subprocess.CompletedProcess[str]:
    """`goodput sandbox VERB` on CLUSTER's sandbox: fault injection (KWOK's chaos stages,
    real kubelets) that another cluster does not offer, so the test is skipped there."""
    box = cluster.fault_box()
    if box is None:
        pytest.skip(f"injects faults through the goodput sandbox (`sandbox {args[0]}`), "
                    "which an external --kubeconfig cluster does not offer")
    command = "kind" if cluster.kind_name else "sandbox"
    return subprocess.run([sys.executable, "-m", "goodput_operator.cli", command, *args,
                           "--name", box.name], capture_output=True, text=True,
                          timeout=timeout, check=True)


def lift_quarantine(cluster: Cluster, node: str) -> None:
    """Undo a quarantine by hand (taint, label, evidence and lemon score), as after a test."""
    cluster.kubectl("taint", "node", node, f"{names.QUARANTINE_TAINT}-", check=False)
    cluster.kubectl("label", "node", node, f"{names.QUARANTINE_LABEL}-")
    cluster.kubectl("annotate", "node", node, f"{names.LEMON_ANNOTATION}-",
                    f"{names.EVIDENCE_ANNOTATION}-")


TRN2_TYPE = "trn2u.48xlarge"
# nodes a test adds for itself (test_preemption) carry this fleet label: never in the pool
OWN_FLEET = "e2e-own"
ULTRASERVER_LABEL = "topology.k8s.aws/ultraserver-id"
POOL_LABEL = "e2e.goodput.dev/pool"  # marks the Trn2 nodes the e2e groups select
_pool: list[str] = []


def wait_pool_ready(cluster: Cluster, pool: str, what: str) -> None:
    """Every node of a test's own POOL (fleets.POOL_LABEL) Ready."""
    from goodput_operator.sandbox import fleet as fleets

    wait_for(lambda: all(
        any(c["type"] == "Ready" and c["status"] == "True"
            for c in n["status"].get("conditions") or [])
        for n in json.loads(cluster.kubectl("get", "nodes", "-l",
                                            f"{fleets.POOL_LABEL}={pool}", "-o", "json")
                            .stdout)["items"]), timeout=60, what=what)


@contextlib.contextmanager
def own_nodes(cluster: Cluster, fleet: Any, pool: str) -> Iterator[list[str]]:
    """A test's own KWOK nodes: POOL of FLEET (a sandbox.fleet.Fleet), labelled as its
    provider labels them, with the ResourceSlices their DRA drivers publish on a real node
    (sandbox.drivers: Neuron devices, GPUs, a GB200/GB300 node's IMEX channels), Ready;
    yields their names in fleet order. Afterwards the nodes and their slices are deleted:
    delete what runs on them first (a pod left on a deleted node waits for the pod
    garbage collector, 40-60 s)."""
    from goodput_operator.sandbox import drivers
    from goodput_operator.sandbox import fleet as fleets

    [chosen] = [p for p in fleet.spec.pools if p.name == pool]
    bodies = fleets.pool_nodes(fleet, chosen)
    names_ = [b["metadata"]["name"] for b in bodies]
    published = drivers.objects(bodies)
    slices = [o["metadata"]["name"] for o in published if o["kind"] == "ResourceSlice"]
    cluster.kubectl("create", "-f", "-", input_text=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": bodies}))
    try:
        if published:
            cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                            input_text=json.dumps({"apiVersion": "v1", "kind": "List",
                                                   "items": published}))
        wait_pool_ready(cluster, pool, f"the {len(names_)} nodes of pool {pool}")
        yield names_
    finally:
        if slices:
            cluster.kubectl("delete", "resourceslice", *slices, "--ignore-not-found")
        cluster.kubectl("delete", "node", *names_, "--ignore-not-found")


def trn2_pool(cluster: Cluster) -> list[str]:
    """The e2e tests' Trn2 nodes, from the fleet the cluster has: the first two complete
    UltraServers (4 nodes each; by node name), in UltraServer then node order, labelled
    POOL_LABEL so the tests' groups select exactly them whatever else the cluster holds.
    On the sandbox's `mixed` fleet: trn2-00-0 .. trn2-01-3."""
    if _pool:
        return _pool
    nodes = json.loads(cluster.kubectl(
        "get", "nodes", "-l", f"node.kubernetes.io/instance-type={TRN2_TYPE},"
        f"{FLEET_LABEL}!={OWN_FLEET}", "-o", "json").stdout)["items"]
    domains: dict[str, list[str]] = {}
    for node in nodes:
        domain = node["metadata"]["labels"].get(ULTRASERVER_LABEL)
        if domain:
            domains.setdefault(domain, []).append(node["metadata"]["name"])
    complete = sorted(sorted(names) for names in domains.values() if len(names) == 4)
    if len(complete) < 2:
        pytest.fail(f"the e2e tests need two Trn2 UltraServers ({TRN2_TYPE} nodes, 4 per "
                    f"{ULTRASERVER_LABEL}); this cluster has {len(complete)}: start it with "
                    "a fleet that has them (`goodput sandbox render-fleet --fleet mixed`)")
    chosen = complete[0] + complete[1]
    cluster.kubectl("label", "node", *chosen, f"{POOL_LABEL}=trn2", "--overwrite")
    _pool.extend(chosen)
    return _pool


def wait_trn2_free(cluster: Cluster) -> None:
    """Tests that size their demand to the Trn2 UltraServers start when no running pod of
    an earlier test still holds one of their nodes (a namespace is deleted without
    waiting: its pods can linger a minute)."""
    def free() -> bool:
        pods = json.loads(cluster.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
        return not any(p["spec"].get("nodeName") in pool
                       and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
                       for p in pods)

    pool = trn2_pool(cluster)
    wait_for(free, timeout=120, what="the Trn2 nodes free of earlier tests' pods")


NO_SWEEPS = {"schedule": ""}
"""Probes off the clock: the default schedule ('0 */6 * * *') would sweep idle nodes when a
test happens to run across 00, 06, 12 or 18 h UTC. Tests of the schedule set their own."""


def trn2_group_spec(**spec: Any) -> dict[str, Any]:
    probes = {**NO_SWEEPS, **spec.pop("probes", {})}
    return {"nodeSelector": {"node.kubernetes.io/instance-type": TRN2_TYPE, POOL_LABEL: "trn2"},
            "networkLevels": ["topology.k8s.aws/network-node-layer-1",
                              "topology.k8s.aws/network-node-layer-2"],
            "accelerator": {"resource": "aws.amazon.com/neuron", "perNode": 16},
            "nodesPerDomain": 4, "probes": probes, **spec}


class Faults:
    """Fails session-fleet nodes for one test; at teardown heals them, waits until they are
    Ready and lifts any quarantine, so the next test finds the fleet whole."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.failed: set[str] = set()

    def fail(self, *nodes: str, signal: str = "not-ready") -> None:
        sandbox_cli(self.cluster, "fail-node", "--signal", signal, *nodes)
        self.failed.update(nodes)

    def heal(self, *nodes: str) -> None:
        sandbox_cli(self.cluster, "heal-node", *nodes)

    def restore(self) -> None:
        if self.failed:
            self.heal(*sorted(self.failed))
            # Ready is not enough: until the lifecycle controller lifts its not-ready taint
            # (up to its 25 s monitor period here) the operator quarantines the node again
            from goodput_operator.sandbox import faults

            box = self.cluster.fault_box()
            for node in sorted(self.failed):
                faults.wait_recovered(box, node)
        for node in sorted({*trn2_pool(self.cluster), *self.failed}):
            lift_quarantine(self.cluster, node)


@pytest.fixture
def faults(crds: Cluster) -> Iterator[Faults]:
    if crds.fault_box() is None:
        pytest.skip("fails nodes through the goodput sandbox (KWOK's chaos stages), which an "
                    "external --kubeconfig cluster does not offer")
    injected = Faults(crds)
    yield injected
    injected.restore()


@pytest.fixture
def make_group(crds: Cluster) -> Iterator[Any]:
    """Create an UltraServerGroup over the Trn2 UltraServers with the given spec fields."""
    names: list[str] = []

    def make(**spec: Any) -> str:
        wait_trn2_free(crds)
        name = f"trn2-{uuid.uuid4().hex[:6]}"
        apply(crds, {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
                     "metadata": {"name": name}, "spec": trn2_group_spec(**spec)})
        names.append(name)
        return name

    yield make
    for name in names:
        crds.kubectl("delete", "usg", name, "--ignore-not-found")


@pytest.fixture(scope="session")
def metrics_source(request: pytest.FixtureRequest, cluster: Cluster,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Prometheus (Debian's package) scraping an exporter the tests drive; an
    in-cluster operator reaches it at the host's address (on kind: the kind network's)."""
    from goodput_operator.sandbox import hostnet, kind
    from goodput_operator.sandbox.prometheus import Prometheus
    from tests.e2e.prometheus import Exporter

    exporter = Exporter()
    address = "127.0.0.1"
    if in_cluster(request.config):
        address = kind.host_address() if cluster.kind_name else hostnet.host_ip()
    server = Prometheus(tmp_path_factory.mktemp("prometheus"),
                        [Prometheus.job("servers", f"127.0.0.1:{exporter.port}")], address)
    server.start()
    yield exporter, server
    server.stop()


def wait_event(cluster: Cluster, involved: str, reason: str, text: str,
               namespace: str | None = None, timeout: float = 15) -> str:
    """An event's text, once posted (events follow the status or node write they report)."""
    scope = ["-n", namespace] if namespace else ["-A"]

    def posted() -> str | None:
        out = str(cluster.kubectl("get", "events", *scope, "--field-selector",
                                  f"involvedObject.name={involved},reason={reason}").stdout)
        return out if text in out else None
    return wait_for(posted, timeout=timeout, what=f"{reason} event on {involved}: {text}")


# the in-cluster operator; the real-node sandbox (module-scoped: one per module using it)
from tests.e2e.incluster import InClusterOperator, image_values, kind_values  # noqa: E402
from tests.e2e.realnodes import ns, real, reference  # noqa: E402, F401


@pytest.fixture
def gpu_group(crds: Cluster) -> Iterator[Any]:
    """Create an UltraServerGroup over one of the fleet's GPU pools; deleted afterwards, so
    that the inference tests' group over the same nodes is not the younger one."""
    made: list[str] = []

    def make(instance_type: str, **spec: Any) -> str:
        name = f"gpu-{uuid.uuid4().hex[:6]}"
        apply(crds, {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
                     "metadata": {"name": name},
                     "spec": {"nodeSelector": {"node.kubernetes.io/instance-type":
                                               instance_type},
                              "networkLevels": ["topology.k8s.aws/network-node-layer-1",
                                                "topology.k8s.aws/network-node-layer-2"],
                              "probes": NO_SWEEPS, **spec}})
        made.append(name)
        return name
    yield make
    for name in made:
        crds.kubectl("delete", "usg", name, "--ignore-not-found")
