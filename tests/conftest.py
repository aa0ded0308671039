"""Test harness: a real cluster for integration/e2e tests, a namespace per test, polling.

By default one sandbox (real etcd, kube-apiserver, scheduler, controller-manager and KWOK
nodes of the `mixed` fleet) is started for the whole session and deleted at its end.
`--operator in-cluster` runs the e2e tests against the chart's Deployment instead of a
process here (tests/e2e/incluster.py).
`--kubeconfig PATH` points the same tests at an existing cluster instead; tests that need
the sandbox itself (fault injection, fleet start-up) are then skipped.
`pytest -m unit` touches no cluster at all.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import settings

# Hypothesis fails an example slower than 200 ms by default (DeadlineExceeded, or Flaky
# when the rerun is quick): a wall-clock assertion in disguise, which the unit suite hit in
# CI while three cluster lanes shared its two cores. Tests never assert wall-clock times.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

T = TypeVar("T")
SESSION_SANDBOX = os.environ.get("GOODPUT_TEST_SANDBOX", "goodput-test")
SESSION_FLEET = "mixed"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--kubeconfig", default=None,
                     help="run integration/e2e tests against this cluster instead of a sandbox")
    parser.addoption("--kind", action="store_true",
                     help="run integration/e2e tests on a kind cluster made for the session "
                          "(`goodput kind up` with the session fleet; Podman, root)")
    parser.addoption("--keep-sandbox", action="store_true",
                     help="leave the session sandbox running after the tests")
    parser.addoption("--operator", choices=("process", "in-cluster"), default="process",
                     help="e2e: run the operator as a process here (default), or in-cluster as "
                          "users do: the Helm chart's Deployment from the image `make image` "
                          "builds, on the sandbox's system nodes (with --kubeconfig: the image "
                          "named by $GOODPUT_E2E_IMAGE, which the cluster must be able to run)")


def in_cluster(config: pytest.Config) -> bool:
    return bool(config.getoption("--operator") == "in-cluster")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test declares its level; a test in tests/unit must be a unit test and so on."""
    for item in items:
        folder = Path(str(item.fspath)).parent.name
        if folder in ("unit", "integration", "e2e", "kind") and \
                not item.get_closest_marker(folder):
            item.add_marker(getattr(pytest.mark, folder))


def http_get(url: str, token: str | None = None) -> tuple[int, bytes]:
    """GET URL: (status, body) whatever the status, with TOKEN as a bearer if given."""
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as err:
        return err.code, bytes(err.read())


def wait_for(probe: Callable[[], T | None], timeout: float = 60, interval: float = 0.25,
             what: str = "condition") -> T:
    """Poll PROBE until it returns something truthy; fail with the last value seen."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


@dataclass
class Cluster:
    """What a test needs to talk to the cluster under test."""

    kubeconfig: Path
    is_sandbox: bool
    sandbox_name: str | None
    kind_name: str | None = None  # a kind cluster made by `goodput kind up`

    def fault_box(self) -> Any:
        """The goodput sandbox or kind cluster whose fault injection (KWOK's chaos stages)
        this cluster offers, or None (another cluster)."""
        from goodput_operator.sandbox import cluster as sandbox_cluster
        from goodput_operator.sandbox import kind

        if self.kind_name:
            return kind.KindCluster(self.kind_name)
        return sandbox_cluster.Sandbox(self.sandbox_name) if self.sandbox_name else None

    def core(self) -> Any:
        from kubernetes import client, config

        api_client = config.new_client_from_config(config_file=str(self.kubeconfig))
        return client.CoreV1Api(api_client)

    def kubectl(self, *args: str, check: bool = True, input_text: str | None = None) -> Any:
        from goodput_operator.sandbox.cluster import run_kubectl

        proc = run_kubectl(self.kubeconfig, *args, input_text=input_text)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr}")
        return proc


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    given = request.config.getoption("--kubeconfig")
    if given:
        yield Cluster(Path(given), is_sandbox=False, sandbox_name=None)
        return
    if request.config.getoption("--kind"):
        yield from _kind_cluster(request)
        return
    from goodput_operator.sandbox import cluster as sandbox_cluster

    box = sandbox_cluster.Sandbox(SESSION_SANDBOX)
    if box.is_running():
        sandbox_cluster.down(box)
    system_nodes = 0
    if in_cluster(request.config):  # the operator's pods need real nodes: two system nodes
        from goodput_operator.sandbox import operator_image

        operator_image.build_image()  # `make image`; system nodes import it as they start
        system_nodes = 2
    sandbox_cluster.up(box, SESSION_FLEET, system_nodes=system_nodes)
    try:
        yield Cluster(box.kubeconfig, is_sandbox=True, sandbox_name=box.name)
    finally:
        if not request.config.getoption("--keep-sandbox"):
            sandbox_cluster.down(box)


@contextlib.contextmanager
def kind_session(name: str, fleet_ref: str, load_operator: bool, keep: bool = False
                 ) -> Iterator[Any]:
    """A kind cluster NAME made for a test session (`goodput kind up`, one worker, the fleet
    FLEET_REF inside it), with the operator image loaded when LOAD_OPERATOR; deleted after
    unless KEEP. Skipped where kind cannot run."""
    from goodput_operator.sandbox import kind, operator_image

    reason = kind.unavailable_reason()
    if reason:
        pytest.skip(f"no kind cluster here: {reason}")
    box = kind.KindCluster(name)
    if box.exists():
        kind.down(box)
    kind.up(box, workers=1, fleet_ref=fleet_ref)
    try:
        if load_operator:
            kind.load(box, [operator_image.build_image().as_image()])  # `make image`
        yield box
    finally:
        if not keep:
            kind.down(box)


def _kind_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """`--kind`: a kind cluster with the session fleet (KWOK inside it), and with
    --operator in-cluster the operator image loaded into it."""
    with kind_session(f"{SESSION_SANDBOX}-kind", SESSION_FLEET, in_cluster(request.config),
                      keep=request.config.getoption("--keep-sandbox")) as box:
        yield Cluster(box.kubeconfig, is_sandbox=False, sandbox_name=None, kind_name=box.name)


@pytest.fixture(scope="session")
def crds(cluster: Cluster) -> Cluster:
    """The cluster with our CRDs installed (server-side apply) and established."""
    root = Path(__file__).resolve().parents[1]
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(root / "crds"))
    from goodput_operator.sandbox.cluster import wait_established

    wait_established(cluster.kubeconfig, "crd/trainingjobs.goodput.dev",
                     "crd/ultraservergroups.goodput.dev", "crd/inferenceendpoints.goodput.dev")
    return cluster


@pytest.fixture
def sandbox(cluster: Cluster) -> Any:
    """The session sandbox itself, for tests of fault injection and the fleet."""
    if not cluster.is_sandbox:
        pytest.skip("tests the goodput sandbox's own commands on the session sandbox; this "
                    "cluster is another (--kubeconfig or --kind)")
    from goodput_operator.sandbox import cluster as sandbox_cluster

    assert cluster.sandbox_name
    return sandbox_cluster.Sandbox(cluster.sandbox_name)


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted (without waiting) afterwards."""
    from kubernetes import client

    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{slug}-{uuid.uuid4().hex[:5]}"
    core = cluster.core()
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # The ServiceAccount controller creates `default` asynchronously; pods need it.
    wait_for(lambda: _has_default_sa(core, name), timeout=30, what=f"{name}/default SA")
    yield name
    core.delete_namespace(name)


def _has_default_sa(core: Any, namespace: str) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        core.read_namespaced_service_account("default", namespace)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


@pytest.fixture(scope="session")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real S3-compatible server on the host: versitygw, built from its Go module on
    first use (sandbox/objectstore.py), for checkpoints on an object store."""
    from goodput_operator.sandbox.objectstore import ObjectStoreServer

    server = ObjectStoreServer(tmp_path_factory.mktemp("objectstore"))
    server.start()
    yield server
    server.stop()
