"""The kind lane: one real kind cluster (goodput kind up: Podman, the node image built here,
KWOK inside it playing the trn2 fleet), the operator installed in it by the Helm chart from
the image built from the Dockerfile, as a user on kind would run it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cluster, kind_session

FLEET = "trn2"  # 4 UltraServers x 4 nodes: small enough for a lane, a real domain shape
RELEASE = NAMESPACE = "goodput-kind"


@dataclass
class KindLane:
    box: Any  # sandbox.kind.KindCluster
    cluster: Cluster
    operator: Any  # tests.e2e.incluster.InClusterOperator
    host: str  # the host's address on the cluster's network


@pytest.fixture(scope="session")
def kind_lane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindLane]:
    from goodput_operator.sandbox import kind
    from tests.e2e.incluster import InClusterOperator, kind_values

    # make test's lane names it (tests/lanes.py); alone, the lane's own name
    name = os.environ.get("GOODPUT_TEST_SANDBOX", "goodput-test-kind")
    with kind_session(name, FLEET, load_operator=True) as box:
        cluster = Cluster(box.kubeconfig, is_sandbox=False, sandbox_name=None)
        root = Path(__file__).resolve().parents[2]
        cluster.kubectl("apply", "--server-side", "-f", str(root / "crds"))
        values = kind_values() | {"replicaCount": 1, "dashboards": {"enabled": False}}
        log = tmp_path_factory.mktemp("kind-operator") / "operator.log"
        deployed = InClusterOperator(cluster, RELEASE, NAMESPACE, values, log)
        deployed.install()
        yield KindLane(box, cluster, deployed, kind.host_address())
        if box.exists():  # the last test deletes the cluster itself
            deployed.save_logs()
            print(f"in-cluster operator logs: {log}")


@pytest.fixture(scope="session")
def cluster(kind_lane: KindLane) -> Cluster:
    """The kind cluster, for the suite's fixtures that take the cluster under test."""
    return kind_lane.cluster
