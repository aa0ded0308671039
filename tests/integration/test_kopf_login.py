"""The pinned kopf logs in through the pinned kubernetes client and reconciles for real.

A tiny kopf operator, authenticated only by `kopf.login_via_client` from the cluster's
kubeconfig, annotates a ConfigMap the test creates: proof that the two pins work together
against a real API server.
"""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from kopf.testing import KopfRunner
from kubernetes import client
from kubernetes.config import kube_config

from tests.conftest import Cluster, wait_for

pytestmark = pytest.mark.integration

MARK = "login.goodput.dev/seen-by"


def build_registry(namespace: str) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.scanning.disabled = True
        settings.posting.enabled = False
        settings.persistence.finalizer = "login.goodput.dev/finalizer"
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
            prefix="login.goodput.dev")
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="login.goodput.dev")

    @kopf.on.create("v1", "configmaps", registry=registry,
                    when=lambda namespace, **_: namespace == namespace_filter)
    def mark(patch: kopf.Patch, **_: Any) -> None:
        patch.metadata.annotations[MARK] = "kopf"

    namespace_filter = namespace
    return registry


@pytest.fixture
def kubeconfig_env(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `KUBECONFIG=...` does for a fresh process: the client reads that variable once,
    at import, into KUBE_CONFIG_DEFAULT_LOCATION, so an in-process test sets both."""
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(cluster.kubeconfig))


@pytest.mark.usefixtures("kubeconfig_env")
def test_kopf_logs_in_with_the_kubernetes_client(cluster: Cluster, namespace: str) -> None:
    core = cluster.core()
    registry = build_registry(namespace)
    args = ["run", "--standalone", "--namespace", namespace, "--verbose"]
    with KopfRunner(args, registry=registry, timeout=60) as runner:
        core.create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="hello")))

        def annotated() -> str | None:
            found = core.read_namespaced_config_map("hello", namespace)
            return (found.metadata.annotations or {}).get(MARK)

        assert wait_for(annotated, timeout=30, what="kopf to annotate the ConfigMap") == "kopf"
    assert runner.exception is None, runner.exception
    assert runner.exit_code == 0
    assert "Client is configured via kubeconfig file." in runner.output
