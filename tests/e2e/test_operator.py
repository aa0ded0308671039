"""The operator process: two replicas with Lease leader election, readiness, hand-over."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    CHART_NAMESPACE,
    Operator,
    apply,
    get_job,
    get_object,
    scoped_operator,
    training_job,
    wait_phase,
)


def test_two_replicas_one_leads_and_a_clean_shutdown_hands_over_at_once(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str,
        chart_kubeconfig: Path, tmp_path: Path) -> None:
    lease = f"e2e-{uuid.uuid4().hex[:6]}"
    args = ("--leader-election", "--lease-namespace", CHART_NAMESPACE, "--lease-name", lease)
    replicas = [Operator(crds, tmp_path / f"replica-{i}.log", chart_kubeconfig, args)
                for i in range(2)]
    e2e.stop()  # the session's operator (no election) would act beside them
    try:
        for replica in replicas:
            replica.start()

        def one_leader() -> list[bool] | None:
            answers = [r.readiness() for r in replicas]
            leading = [bool(a.get("leader")) for a in answers]
            return leading if all(a["ok"] for a in answers) and sum(leading) == 1 else None

        leading = wait_for(one_leader, timeout=60, what="both ready, exactly one leading")
        leader, standby = (replicas[0], replicas[1]) if leading[0] else (replicas[1],
                                                                          replicas[0])
        holder = get_object(crds, "lease", CHART_NAMESPACE, lease)["spec"]["holderIdentity"]
        assert holder, "the Lease names its holder"
        apply(crds, training_job("first", trn2_group, 4), namespace)
        wait_phase(crds, namespace, "first", "Running")

        leader.stop()  # SIGTERM: the leader gives the Lease back on its way out
        wait_for(lambda: standby.readiness().get("leader"), timeout=15,
                 what="the standby to lead after a clean shutdown (not after expiry)")
        after = get_object(crds, "lease", CHART_NAMESPACE, lease)["spec"]
        assert after["holderIdentity"] not in ("", holder)
        assert after["leaseTransitions"] >= 1
        apply(crds, training_job("second", trn2_group, 4), namespace)
        wait_phase(crds, namespace, "second", "Running")
        assert "released leadership" in leader.log.read_text()
    finally:
        for replica in replicas:
            replica.stop()
        e2e.start()


def test_a_namespaced_operator_acts_only_in_its_namespaces(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str,
        chart_kubeconfig: Path, tmp_path: Path) -> None:
    with scoped_operator(e2e, crds, namespace, chart_kubeconfig,
                         tmp_path / "scoped.log") as (scoped, elsewhere):
        scoped.start()
        apply(crds, training_job("mine", trn2_group, 4), namespace)
        apply(crds, training_job("theirs", trn2_group, 4), elsewhere)
        wait_phase(crds, namespace, "mine", "Running")
        theirs = get_job(crds, elsewhere, "theirs")
        assert "status" not in theirs, "a job outside --namespace is left alone"
        assert not crds.kubectl("get", "pods", "-n", elsewhere, "-o", "name").stdout.strip()
        crds.kubectl("delete", "tj", "theirs", "-n", elsewhere, "--wait=true", check=False)
