"""`goodput node quarantine|release`: a hand-made quarantine, as the operator's own looks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from goodput_operator import names
from tests.conftest import Cluster

pytestmark = pytest.mark.integration


@pytest.fixture
def node(cluster: Cluster) -> str:
    """The cluster's last H100 node by name (p5-00-3 on the sandbox): no e2e test uses it."""
    names = cluster.kubectl("get", "nodes", "-l", "node.kubernetes.io/instance-type=p5.48xlarge",
                            "-o", "jsonpath={.items[*].metadata.name}").stdout.split()
    if not names:
        pytest.skip("the cluster has no p5.48xlarge nodes")
    return str(sorted(names)[-1])


def node_cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "goodput_operator.cli", "node", *args,
                           "--kubeconfig", str(cluster.kubeconfig)],
                          capture_output=True, text=True, timeout=60, check=False)


def test_quarantine_by_hand_then_release(cluster: Cluster, node: str) -> None:
    held = node_cli(cluster, "quarantine", node, "--reason", "NvlinkErrors",
                    "--message", "xid 74 on gpu 3")
    try:
        assert held.returncode == 0, held.stderr
        body = json.loads(cluster.kubectl("get", "node", node, "-o", "json").stdout)
        taint = next(t for t in body["spec"]["taints"] if t["key"] == names.QUARANTINE_TAINT)
        assert (taint["value"], taint["effect"]) == ("NvlinkErrors", "NoSchedule")
        assert body["metadata"]["labels"][names.QUARANTINE_LABEL] == "NvlinkErrors"
        evidence = json.loads(body["metadata"]["annotations"]
                              [names.EVIDENCE_ANNOTATION])
        assert evidence["by"] == "manual" and evidence["evidence"] == "xid 74 on gpu 3"
    finally:
        released = node_cli(cluster, "release", node)
    assert released.returncode == 0, released.stderr
    body = json.loads(cluster.kubectl("get", "node", node, "-o", "json").stdout)
    assert not any(t["key"] == names.QUARANTINE_TAINT for t in body["spec"].get("taints")
                   or [])
    assert names.QUARANTINE_LABEL not in body["metadata"]["labels"]
    assert names.EVIDENCE_ANNOTATION not in (body["metadata"].get("annotations") or {})
    again = node_cli(cluster, "release", node)
    assert again.returncode == 0 and "is not quarantined" in again.stdout


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        (("quarantine", "any-node", "--reason", "not camel"), "--reason must be CamelCase", 2),
        (("quarantine", "no-such-node"), "node no-such-node: not found", 1),
        (("release", "no-such-node"), "node no-such-node: not found", 1),
    ],
)
def test_bad_input_gets_one_line(cluster: Cluster, args: tuple[str, ...], message: str,
                                 code: int) -> None:
    result = node_cli(cluster, *args)
    assert result.returncode == code
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
