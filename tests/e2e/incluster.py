"""The operator as users run it: the Helm chart's Deployment (two replicas, leader election,
probes, the chart's security context and RBAC) from the image built from the Dockerfile,
on the sandbox's system nodes (real kubelets without accelerators).

`InClusterOperator` answers what the e2e tests ask of the host-process `Operator`
(start, stop, metrics, readiness, report_url), so a scenario runs against either:
`pytest --operator in-cluster` runs the whole suite this way; tests/e2e/test_real_nodes.py
always does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from goodput_operator.operator.leader import leading_pod
from goodput_operator.sandbox import cluster as sandbox_cluster
from goodput_operator.sandbox import images, operator_image, realnode
from tests import helm
from tests.conftest import Cluster, http_get, wait_for

REPLICAS = 2
LEASE = "goodput-operator"  # the chart's leaderElection.leaseName


def image_values(tag: str) -> dict[str, Any]:
    """Chart values for the sandbox: the locally built image (never pulled: no registry),
    pods on the system nodes, SDC probe Jobs from the worker image (real nodes have it)."""
    return {"replicaCount": REPLICAS,
            "image": {"repository": operator_image.REPOSITORY, "tag": tag,
                      "pullPolicy": "Never"},
            "nodeSelector": {realnode.SYSTEM_LABEL: "true"},
            "probeImage": images.WORKER_IMAGE}


def kind_values() -> dict[str, Any]:
    """Chart values on a kind cluster made by `goodput kind up`: the image `make image`
    builds (loaded into kind), on kind's own nodes (never a simulated one), the tests'
    Prometheus at the host's address on the kind network."""
    from goodput_operator import __version__
    from goodput_operator.sandbox import kind

    return {**image_values(__version__), "nodeSelector": {}, "affinity": kind.OFF_THE_FLEET,
            "prometheusAllow": [f"http://{kind.host_address()}"]}


def build_and_load(box: sandbox_cluster.Sandbox, tag: str) -> operator_image.OperatorImage:
    """`make image` for TAG, imported into BOX's system nodes."""
    built = operator_image.build_image(tag)
    assert sandbox_cluster.load_operator_image(box, built.as_image()), \
        f"sandbox {box.name!r} has no system nodes to run the operator on"
    return built


class InClusterOperator:
    def __init__(self, cluster: Cluster, release: str, namespace: str, values: dict[str, Any],
                 log: Path) -> None:
        self.cluster = cluster
        self.release = release
        self.namespace = namespace
        self.values = values
        self.log = log
        self.name = helm.account_name(release)  # the chart's fullname: Deployment, Services
        self.probe_namespace = str(values.get("probeNamespace") or namespace)

    # ---- lifecycle -----------------------------------------------------------------------

    def install(self, **values: Any) -> None:
        """helm upgrade --install with the base values and VALUES; wait until rolled out."""
        helm.install(self.cluster.kubeconfig, self.release, self.namespace,
                     **(self.values | values))
        self.wait_rolled_out()

    def rollback(self, revision: int) -> None:
        helm.helm("rollback", self.release, str(revision), "--namespace", self.namespace,
                  kubeconfig=self.cluster.kubeconfig)
        self.wait_rolled_out()

    def wait_rolled_out(self) -> None:
        self.cluster.kubectl("rollout", "status", f"deployment/{self.name}", "-n",
                             self.namespace, "--timeout=240s")
        wait_for(self.leader, timeout=60, what="a leader among the operator pods")

    def start(self) -> None:
        self.cluster.kubectl("scale", f"deployment/{self.name}", "-n", self.namespace,
                             f"--replicas={REPLICAS}")
        self.wait_rolled_out()

    def stop(self) -> None:
        """No replica left (as a stopped process): scale to zero, wait for the pods to go."""
        self.save_logs()
        self.cluster.kubectl("scale", f"deployment/{self.name}", "-n", self.namespace,
                             "--replicas=0")
        # gone, not terminating: a terminating leader may still finish a pass
        wait_for(lambda: not self.pods(terminating=True), timeout=90,
                 what="the operator pods gone")

    def save_logs(self, why: str = "") -> None:
        """Each replica's log appended to self.log, and a restarted replica's log from
        before its restart (what a crash said, which its new container's log lacks); WHY
        heads them (a test's failure, say)."""
        with self.log.open("a") as out:
            if why:
                out.write(f"======== {why}\n")
            for pod in self.pods():
                name = pod["metadata"]["name"]
                restarts = sum(s.get("restartCount", 0) for s in
                               pod.get("status", {}).get("containerStatuses") or [])
                if restarts:
                    out.write(f"==== {name}, before its last restart ({restarts} restarts)\n")
                    out.write(self.cluster.kubectl("logs", name, "-n", self.namespace,
                                                   "--previous", check=False).stdout)
                out.write(f"==== {name}\n")
                out.write(self.cluster.kubectl("logs", name, "-n", self.namespace,
                                               check=False).stdout)

    # ---- state -------------------------------------------------------------------------

    def pods(self, terminating: bool = False) -> list[dict[str, Any]]:
        """The operator's pods; TERMINATING: those being deleted too."""
        selector = f"app.kubernetes.io/instance={self.release}"
        items: list[dict[str, Any]] = json.loads(self.cluster.kubectl(
            "get", "pods", "-n", self.namespace, "-l", selector, "-o", "json").stdout)["items"]
        return [p for p in items if terminating or not p["metadata"].get("deletionTimestamp")]

    def holder(self) -> str:
        """The Lease's holder identity ("" while nobody holds it)."""
        proc = self.cluster.kubectl("get", "lease", LEASE, "-n", self.namespace, "-o",
                                    "jsonpath={.spec.holderIdentity}", check=False)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    def leader(self) -> dict[str, Any] | None:
        """The leading pod: holds the Lease, Ready, and labelled for the reports Service."""
        return leading_pod(self.pods(), self.holder())

    def _get(self, port: int, path: str, token: str | None = None) -> tuple[int, bytes]:
        leader = wait_for(self.leader, timeout=60, what="the leading operator pod")
        return http_get(f"http://{leader['status']['podIP']}:{port}{path}", token)

    def metrics(self) -> str:
        """The leader's /metrics (the standby's gauges read zero)."""
        return self._get(self.values_port("metrics", 9090), "/metrics")[1].decode()

    def readiness(self) -> dict[str, Any]:
        return dict(json.loads(self._get(self.values_port("health", 8080), "/readyz")[1]))

    def healthy(self) -> bool:
        return self.leader() is not None

    def health_get(self, path: str, token: str | None = None) -> tuple[int, bytes]:
        """GET PATH on the leader's health port (status, body), TOKEN as a bearer."""
        return self._get(self.values_port("health", 8080), path, token)

    def resident_mib(self) -> float:
        """The leader's resident memory, from its process metrics (prometheus_client's)."""
        found = re.search(r"^process_resident_memory_bytes (\S+)$", self.metrics(), re.M)
        assert found, "the leader's /metrics has no process_resident_memory_bytes"
        return float(found.group(1)) / 2**20

    def values_port(self, key: str, default: int) -> int:
        return int((self.values.get(key) or {}).get("port", default))

    def service_ip(self, suffix: str) -> str:
        return str(self.cluster.kubectl("get", "service", f"{self.name}-{suffix}", "-n",
                                        self.namespace, "-o",
                                        "jsonpath={.spec.clusterIP}").stdout.strip())

    @property
    def report_url(self) -> str:
        """The reports Service by its ClusterIP: kube-proxy routes it from the host too."""
        return f"http://{self.service_ip('reports')}:{self.values_port('reports', 8081)}"
