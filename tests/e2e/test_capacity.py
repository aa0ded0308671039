"""One truth for accelerator capacity on the sandbox: overlapping groups, a namespaced
operator, and pods the operator did not make never lead to two gangs on the same devices."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from goodput_operator.times import millis
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    Operator,
    apply,
    get_job,
    get_object,
    job_pods,
    scoped_operator,
    training_job,
    trn2_pool,
    wait_phase,
)
from tests.e2e.test_trainingjob import node_labels

ULTRASERVER = "topology.k8s.aws/ultraserver-id"
NEURON = "aws.amazon.com/neuron"


def hog(name: str, node: str, devices: int = 16) -> dict[str, Any]:
    """A plain pod (no operator, no owner) holding DEVICES Neuron devices on NODE."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "hog", "image": "registry.invalid/hog",
                                     "resources": {"limits": {NEURON: str(devices)}}}]}}


def nodes_of(cluster: Cluster, namespace: str, job: str) -> set[str]:
    return {p["spec"]["nodeName"] for p in job_pods(cluster, namespace, job)}


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == kind), {})


def test_overlapping_groups_the_later_says_so_and_two_jobs_never_share_a_node(
        e2e: Operator, crds: Cluster, namespace: str, make_group: Any) -> None:
    pool = trn2_pool(crds)
    first = node_labels(crds)[pool[0]][ULTRASERVER]
    older = make_group(nodeSelector={ULTRASERVER: first})   # one UltraServer
    created = get_object(crds, "usg", "", older)["metadata"]["creationTimestamp"]
    wait_for(lambda: millis(time.time()) > created, timeout=5, what="the next second")
    later = make_group()                                     # the whole pool: overlaps
    wait_for(lambda: condition(get_object(crds, "usg", "", later), "Overlapping")
             .get("status") == "True", timeout=30, what="the Overlapping condition")
    message = condition(get_object(crds, "usg", "", later), "Overlapping")["message"]
    assert f"4 node(s) also selected by the older group '{older}'" in message
    assert all(node in message for node in pool[:4])
    assert condition(get_object(crds, "usg", "", older), "Overlapping")["status"] == "False"
    assert get_object(crds, "usg", "", later)["status"]["totals"]["nodes"] == 4
    # both jobs in one apply: each group may only use its own nodes
    crds.kubectl("apply", "-n", namespace, "-f", "-", input_text="\n---\n".join(
        json.dumps(training_job(name, group, 4)) for name, group in
        (("in-older", older), ("in-later", later))))
    wait_phase(crds, namespace, "in-older", "Running")
    wait_phase(crds, namespace, "in-later", "Running")
    assert nodes_of(crds, namespace, "in-older") == set(pool[:4])
    assert nodes_of(crds, namespace, "in-later") == set(pool[4:])


def test_a_namespaced_operator_counts_another_namespace_s_pods(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str,
        chart_kubeconfig: Path, tmp_path: Path) -> None:
    """An operator acting only in one namespace still sees the devices a pod in another
    namespace holds on the first UltraServer: it places its job on the second."""
    pool = trn2_pool(crds)
    with scoped_operator(e2e, crds, namespace, chart_kubeconfig,
                         tmp_path / "scoped.log") as (scoped, elsewhere):
        apply(crds, hog("hog", pool[1]), elsewhere)  # one node of the first UltraServer
        scoped.start()
        apply(crds, training_job("mine", trn2_group, 4), namespace)
        wait_phase(crds, namespace, "mine", "Running")
        assert nodes_of(crds, namespace, "mine") == set(pool[4:])


def test_a_plain_pod_is_counted_and_a_gang_needing_its_devices_waits_naming_it(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str) -> None:
    pool = trn2_pool(crds)
    apply(crds, hog("hog-a", pool[1], devices=8), namespace)
    apply(crds, hog("hog-b", pool[6], devices=16), namespace)
    apply(crds, training_job("whole", trn2_group, 4), namespace)  # needs a whole UltraServer

    def waiting() -> str:
        return str((get_job(crds, namespace, "whole").get("status") or {}).get("message", ""))

    wait_for(lambda: "held by pod" in waiting(), timeout=30, what="the reason naming the pod")
    message = waiting()
    assert f"node {pool[1]}: 8 of 16 held by pod {namespace}/hog-a" in message, message
    assert f"node {pool[6]}: 16 of 16 held by pod {namespace}/hog-b" in message, message
    assert get_job(crds, namespace, "whole")["status"]["phase"] == "Pending"
    assert not any(p["spec"].get("nodeName") for p in job_pods(crds, namespace, "whole"))
    crds.kubectl("delete", "pod", "hog-a", "-n", namespace, "--grace-period=0", "--force")
    wait_phase(crds, namespace, "whole", "Running")
    assert nodes_of(crds, namespace, "whole") == set(pool[:4])
    crds.kubectl("delete", "pod", "hog-b", "-n", namespace, "--grace-period=0", "--force")
