"""Shared-cluster trust (TENANCY.md), end to end: team A, in a namespace of its own, tries
an attack on team B's running job in the same group, and B's job runs on. Each attack
also has unit table cases (tests/unit/test_priority.py, ...)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from goodput_operator import names
from goodput_operator.sdk import Reporter, ReportError
from tests import helm
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    CHART_NAMESPACE,
    SD_READER,
    Faults,
    Operator,
    apply,
    delete_all,
    get_job,
    job_pods,
    settle_autoscaler,
    training_job,
    trn2_pool,
    wait_phase,
)
from tests.e2e.test_inference import autoscaled, condition, get_ie, wait_status
from tests.e2e.test_recovery import (
    group_status,
    quarantined,
    ranks,
    running_again,
    worker_token,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def team_a(crds: Cluster, namespace: str) -> Iterator[str]:
    """A second tenant's namespace beside the test's own (team B's)."""
    name = f"{namespace[:50]}-a"
    crds.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        crds.kubectl("delete", "tj,pods", "--all", "-n", name, "--wait=true", check=False)
        crds.kubectl("delete", "namespace", name, "--wait=false", check=False)


def placed_reason(crds: Cluster, namespace: str, job: str) -> tuple[str, str] | None:
    conditions = (get_job(crds, namespace, job).get("status") or {}).get("conditions") or []
    found = next((c for c in conditions if c["type"] == "Placed"), None)
    return (found["reason"], found["message"]) if found else None


def test_a_typed_priority_preempts_no_other_team_and_an_admin_grant_does(
        e2e: Operator, crds: Cluster, namespace: str, team_a: str, trn2_group: str) -> None:
    """Team A's gang at spec.priority 1000000 with LowerPriority waits behind team B's
    running job (the number orders only A's own jobs); a gang naming a class no one made
    says so and waits; once the admin makes that PriorityClass, granted to A's namespace
    with the right to preempt across namespaces, B is preempted and A's pods carry the
    class. (A class not granted to the namespace: tests/unit/test_priority.py.)"""
    apply(crds, training_job("b-train", trn2_group, 8, checkpoint={"dir": "/fsx/b"},
                             preemptionGraceSeconds=0), namespace)
    wait_phase(crds, namespace, "b-train", "Running")

    grab = training_job("grab", trn2_group, 8, priority=1_000_000,
                        preemptionPolicy="LowerPriority")
    apply(crds, grab, team_a)
    reason = wait_for(lambda: placed_reason(crds, team_a, "grab"), timeout=30,
                      what="grab's Placed condition")
    assert reason[0] == "WaitingForCapacity", reason
    klass = f"urgent-{uuid.uuid4().hex[:6]}"
    apply(crds, training_job("urgent", trn2_group, 8, priorityClassName=klass,
                             preemptionPolicy="LowerPriority"), team_a)
    wait_for(lambda: (placed_reason(crds, team_a, "urgent") or ("",))[0]
             == "PriorityClassNotFound", timeout=30, what="a class no one made, said")
    assert not get_job(crds, namespace, "b-train")["status"].get("preemption")
    assert get_job(crds, namespace, "b-train")["status"]["phase"] == "Running"

    try:
        apply(crds, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": {"name": klass, "annotations": {
                         names.PRIORITY_NAMESPACES_ANNOTATION: f"{namespace},{team_a}",
                         names.PREEMPT_ACROSS_ANNOTATION: "true"}},
                     "value": 1000, "preemptionPolicy": "PreemptLowerPriority"})
        wait_phase(crds, team_a, "urgent", "Running", timeout=60)
        stopped = get_job(crds, namespace, "b-train")["status"]
        assert stopped["phase"] in ("Recovering", "Pending"), stopped["phase"]
        preempted = {c["type"]: c for c in stopped["conditions"]}["Preempted"]
        assert f"preempted by {team_a}/urgent (class {klass} (1000)" in preempted["message"]
        assert {p["spec"].get("priorityClassName") for p in job_pods(crds, team_a, "urgent")} \
            == {klass}
        assert get_job(crds, team_a, "grab")["status"]["phase"] == "Pending"
        assert e2e.healthy()
    finally:
        crds.kubectl("delete", "tj", "--all", "-n", team_a, "--wait=true", check=False)
        crds.kubectl("delete", "priorityclass", klass, "--ignore-not-found")


def squatter(name: str, node: str) -> dict[str, Any]:
    """A pod pinned to NODE, asking for all its chips, that a gate of its own keeps from
    ever binding."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                     "schedulingGates": [{"name": "example.com/never"}],
                     "containers": [{"name": "c", "image": "example.com/c:1", "resources": {
                         "requests": {"aws.amazon.com/neuron": "16"},
                         "limits": {"aws.amazon.com/neuron": "16"}}}]}}


def test_gated_squatters_book_nothing_and_the_group_names_them(
        e2e: Operator, crds: Cluster, namespace: str, team_a: str, trn2_group: str) -> None:
    """Team A pins a gated pod to every node of the group (once: 0 of 128 chips free for
    anyone); team B's gang of 8 is placed and runs, and the group says which pods it
    ignores and why."""
    nodes = trn2_pool(crds)
    for i, node in enumerate(nodes):
        apply(crds, squatter(f"squat-{i}", node), team_a)
    apply(crds, training_job("b-train", trn2_group, len(nodes)), namespace)
    wait_phase(crds, namespace, "b-train", "Running", timeout=60)
    ignored = wait_for(lambda: len((s := group_status(crds, trn2_group)).get(
        "ignoredPods") or []) == len(nodes) and s["ignoredPods"], timeout=30,
        what="the squatters named on the group")
    assert {p["pod"] for p in ignored} == {f"{team_a}/squat-{i}" for i in range(len(nodes))}
    assert all("scheduling gates of its own" in p["reason"] for p in ignored)
    assert e2e.healthy()


def test_the_charts_admission_policy_lets_only_pod_creators_create_jobs(
        crds: Cluster, namespace: str, trn2_group: str) -> None:
    """The operator creates the pods with its own ServiceAccount, so whoever may create a
    TrainingJob runs pods as if they had created them: the chart's policy refuses the job
    to a user who may not create pods in the namespace, and admits it once they may."""
    release = f"vap-{uuid.uuid4().hex[:6]}"
    rendered = helm.helm("template", release, str(helm.CHART)).stdout
    policy = [d for d in yaml.safe_load_all(rendered)
              if d and d["kind"].startswith("ValidatingAdmissionPolicy")]
    assert len(policy) == 2
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "jobs-only"},
            "rules": [{"apiGroups": ["goodput.dev"], "resources": ["trainingjobs"],
                       "verbs": ["create", "get", "patch"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "alice"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": "jobs-only"},
               "subjects": [{"kind": "User", "name": "alice",
                             "apiGroup": "rbac.authorization.k8s.io"}]}
    job = json.dumps(training_job("alices", trn2_group, 1))
    try:
        for doc in policy:
            apply(crds, doc)
        apply(crds, role, namespace)
        apply(crds, binding, namespace)

        def as_alice() -> Any:
            return crds.kubectl("create", "--as=alice", "-n", namespace, "-f", "-",
                                input_text=job, check=False)
        refused = wait_for(lambda: (r := as_alice()).returncode != 0 and
                           "needs the right to create pods" in r.stderr and r, timeout=30,
                           what="the policy in force")
        assert "trainingjobs in namespace" in refused.stderr
        role["rules"].append({"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]})
        apply(crds, role, namespace)
        wait_for(lambda: as_alice().returncode == 0, timeout=30, what="alice, a pod creator")
    finally:
        for doc in policy:
            crds.kubectl("delete", doc["kind"], doc["metadata"]["name"], "--ignore-not-found")


def test_a_name_another_object_holds_is_a_refusal_not_a_share(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str) -> None:
    """A TrainingJob named as an InferenceEndpoint of its namespace would share the
    endpoint's Service (no rendezvous, or clients reaching training pods): the job is told
    the name is taken, by whom, and creates no worker; so is a job whose disruption
    budget's name a PodDisruptionBudget of the tenant's holds."""
    from tests.e2e.test_hostile import inference_endpoint

    def refused(name: str = "shared") -> str | None:
        for c in (get_job(crds, namespace, name).get("status") or {}).get(
                "conditions") or []:
            if c["type"] == "WorkersCreated" and c["reason"] == "CreateRefused":
                return str(c["message"])
        return None

    apply(crds, inference_endpoint("shared", trn2_group), namespace)
    try:
        wait_for(lambda: crds.kubectl("get", "service", "shared", "-n", namespace,
                                      check=False).returncode == 0, timeout=30,
                 what="the endpoint's Service")
        apply(crds, training_job("shared", trn2_group, 1), namespace)
        said = wait_for(refused, timeout=30, what="the taken name refused")
        assert "belongs to InferenceEndpoint shared, not to TrainingJob shared" in said
        assert not job_pods(crds, namespace, "shared")
        # the job's disruption budget likewise: one the tenant made is not the gang's
        crds.kubectl("create", "poddisruptionbudget", "budget", "-n", namespace,
                     "--selector=app=other", "--min-available=1")
        apply(crds, training_job("budget", trn2_group, 1), namespace)
        said = wait_for(lambda: refused("budget"), timeout=30,
                        what="the taken budget name refused")
        assert "PodDisruptionBudget budget already exists and belongs to no controller" \
            in said
        assert not job_pods(crds, namespace, "budget")
        assert e2e.healthy()
    finally:
        crds.kubectl("delete", "ie", "shared", "-n", namespace, "--wait=true", check=False)


def test_dozens_of_capped_gangs_that_fit_nowhere_own_no_pods_and_cost_b_nothing(
        e2e: Operator, crds: Cluster, namespace: str, team_a: str, make_group: Any,
        faults: Faults) -> None:
    """Team A submits 40 8,192-worker jobs that fit nowhere (each pass once built and
    created 98,000 gated pods for twelve of them): they wait as statuses with no pods,
    each searched in turn (more than the 32 searches a pass runs for one namespace:
    decide.turns; every one is searched, none starves), the operator's memory stays
    bounded; beside them a quantity bomb in a template's requests (bounded parsing:
    refused in microseconds); a node failure under team B's running job is recovered from
    as it is without them (running_again's usual bound), and a restarted operator is
    ready."""
    group = make_group(spares={"perDomain": 1})
    apply(crds, training_job("b-train", group, 3, checkpoint={"dir": "/fsx/b"}), namespace)
    job = wait_phase(crds, namespace, "b-train", "Running")
    before = e2e.resident_mib()
    capped = [f"capped-{i}" for i in range(40)]
    apply(crds, {"apiVersion": "v1", "kind": "List",  # one request, not 40
                 "items": [training_job(name, group, 8192) for name in capped]}, team_a)
    for name in capped:
        wait_for(lambda name=name: (placed_reason(crds, team_a, name) or ("",))[0]
                 == "WaitingForCapacity", timeout=60, what=f"{name} waiting for capacity")
    assert all(job_pods(crds, team_a, name) == [] for name in capped)
    grown = e2e.resident_mib() - before
    assert grown < 200, f"the operator grew {grown:.0f} MiB for 40 waiting jobs"

    bomb = training_job("bomb", group, 1)             # a quantity that took 7-13 s of every
    bomb["spec"]["template"]["spec"]["containers"][0]["resources"] = {  # pass to expand
        "requests": {"cpu": "1e10000000"}}
    apply(crds, bomb, team_a)

    faults.fail(ranks(job)[1])                      # team B's node fails meanwhile
    again = running_again(crds, namespace, "b-train", 1)
    assert again["status"]["incidents"][-1]["cause"] == "NodeFailure"
    assert all(job_pods(crds, team_a, name) == [] for name in capped)
    e2e.stop()                                      # a new leader lists it all again
    e2e.start()
    wait_for(lambda: e2e.readiness().get("ok"), timeout=60,
             what="the restarted operator ready beside the 40 jobs")
    assert all(job_pods(crds, team_a, name) == [] for name in capped)


def sd_status(e2e: Operator, token: str | None) -> tuple[int, bytes]:
    return e2e.health_get("/sd/serving", token)


def test_sd_serving_answers_only_the_readers_the_chart_grants(
        e2e: Operator, crds: Cluster, namespace: str) -> None:
    """/sd/serving lists every namespace's serving pods: without credentials it is a 401,
    with a tenant's token a 403 (a TokenReview, then a SubjectAccessReview by the chart's
    ServiceAccount), and with the token of the ServiceAccount the chart's
    serviceDiscovery.readers names, the list."""
    assert sd_status(e2e, None)[0] == 401
    assert sd_status(e2e, "not-a-token")[0] == 401
    wait_for(lambda: crds.kubectl("get", "sa", "default", "-n", namespace,
                                  check=False).returncode == 0,
             timeout=30, what="default service account")
    tenant = crds.kubectl("create", "token", "default", "-n", namespace).stdout.strip()
    status, body = sd_status(e2e, tenant)
    assert status == 403 and b"may not get /sd/serving" in body, body
    crds.kubectl("create", "serviceaccount", SD_READER, "-n", CHART_NAMESPACE, check=False)
    reader = crds.kubectl("create", "token", SD_READER, "-n", CHART_NAMESPACE).stdout.strip()
    status, body = sd_status(e2e, reader)
    assert status == 200 and isinstance(json.loads(body), list), body


def test_forged_votes_leave_room_for_another_teams_and_a_forged_worker_blames_nothing(
        e2e: Operator, crds: Cluster, namespace: str, team_a: str, make_group: Any,
        faults: Faults) -> None:
    """Team A's own replicas vote two of its ranks corrupt (forged or not, a tenant's
    word): one node goes out, the other is held and listed in the group's heldEvidence,
    so that team B's real divergence still goes out at once (maxUnavailable 2: one
    namespace holds at most half). A pod of A's making, owned by A's job, with a rank label
    and bound straight to B's node, has its reports refused: B's node is never blamed.
    (FAULTS: its teardown lifts the quarantines, so the next test finds the fleet whole.)"""
    group = make_group(quarantine={"maxUnavailable": 2})
    apply(crds, training_job("a-votes", group, 5, sdc={"crossReplicaCheck": True}), team_a)
    apply(crds, training_job("b-train", group, 3, sdc={"crossReplicaCheck": True}),
          namespace)
    a_job = wait_phase(crds, team_a, "a-votes", "Running")
    b_job = wait_phase(crds, namespace, "b-train", "Running")
    a_placed, b_placed = ranks(a_job), ranks(b_job)

    impostor = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "impostor", "labels": {names.JOB_LABEL: "a-votes", names.RANK_LABEL: "1",
                                       names.RESTART_LABEL: "0"},
        "ownerReferences": [{"apiVersion": "goodput.dev/v1alpha1", "kind": "TrainingJob",
                             "name": "a-votes", "uid": a_job["metadata"]["uid"],
                             "controller": True}]},
        "spec": {"nodeName": b_placed[1],
                 "containers": [{"name": "c", "image": "example.com/c:1"}]}}
    apply(crds, impostor, team_a)
    forged = Reporter(e2e.report_url, worker_token(crds, team_a, "impostor"))
    with pytest.raises(ReportError) as refused:
        forged.send("step", {"step": 100, "metrics": {"loss": 1.0},
                             "fingerprint": "ffffffff" * 4})
    assert refused.value.status == 403, refused.value

    def vote(ns: str, job: str, odd: dict[int, str]) -> None:
        for pod in job_pods(crds, ns, job):
            if pod["metadata"]["name"] == "impostor":
                continue
            rank = int(pod["metadata"]["labels"][names.RANK_LABEL])
            Reporter(e2e.report_url, worker_token(crds, ns, pod["metadata"]["name"])
                     ).report_step(100, {"loss": 1.0},
                                   fingerprint=odd.get(rank, "00c0ffee") * 4)
    vote(team_a, "a-votes", {1: "deadbeef", 2: "0badf00d"})   # two of A's ranks "diverge"
    held = wait_for(lambda: group_status(crds, group).get("heldEvidence"), timeout=30,
                    what="one of A's two blamed nodes held")
    assert [(h["owner"], h["reason"]) for h in held] == [
        (f"{team_a}/a-votes", "SilentDataCorruption")]
    assert held[0]["node"] in (a_placed[1], a_placed[2])
    out = {a_placed[1], a_placed[2]} - {held[0]["node"]}
    [a_out] = out
    a_body = wait_for(lambda: quarantined(crds, a_out), timeout=30,
                      what="the other of A's blamed nodes held for a probe")
    # A's word holds the node for a probe; it is no incident of the node's (TENANCY.md 1)
    annotations = a_body["metadata"]["annotations"]
    assert json.loads(annotations[names.EVIDENCE_ANNOTATION])["owner"] == f"{team_a}/a-votes"
    assert names.LEMON_ANNOTATION not in annotations
    vote(namespace, "b-train", {2: "deadbeef"})               # B's rank 2 really diverges
    wait_for(lambda: quarantined(crds, b_placed[2]), timeout=30,
             what="team B's diverged node quarantined beside A's")
    assert quarantined(crds, b_placed[1]) is None, "the impostor's node was blamed"
    crds.kubectl("delete", "pod", "impostor", "-n", team_a, "--wait=false", check=False)


def test_standby_hoarding_takes_no_running_team_b_job_and_the_admins_cap_holds(
        e2e: Operator, crds: Cluster, namespace: str, team_a: str, make_group: Any,
        metrics_source: Any) -> None:
    """Team A's endpoint asks 64 standby UltraServers (outside any quota) and gets the one
    whole free domain; team B's gang of an admin's class, opted in with borrowStandby,
    borrows it; A's burst then wants it back and may not take it from a higher class: B
    runs on, A is told it is limited. An operator restarted with the admin's cap at 0
    (--standby-domains-per-namespace) leaves A no standby and is ready."""
    exporter, prometheus = metrics_source
    group = make_group()                                  # 2 UltraServers x 4 nodes
    exporter.queue(team_a, "hoard", 5)                    # one two-node replica
    apply(crds, autoscaled("hoard", group, prometheus.url, workers=2, standbyDomains=64),
          team_a)
    klass = f"b-critical-{uuid.uuid4().hex[:6]}"
    try:
        status = wait_status(crds, team_a, "hoard", "1 replica, the one whole free domain held",
                             readyReplicas=1, standby=lambda held: len(held["domains"]) == 1)
        [spare] = status["standby"]["domains"]
        apply(crds, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": {"name": klass, "annotations": {
                         names.PRIORITY_NAMESPACES_ANNOTATION: namespace}},
                     "value": 1000, "preemptionPolicy": "Never"})
        apply(crds, training_job("b-borrow", group, 4, borrowStandby=True,
                                 priorityClassName=klass), namespace)
        job = wait_phase(crds, namespace, "b-borrow", "Running", timeout=60)
        assert "borrows standby UltraServer(s)" in job["status"]["placement"]["reason"]
        assert job["status"]["placement"]["domains"] == [spare]
        assert {p["spec"].get("priorityClassName") for p in job_pods(crds, namespace,
                                                                      "b-borrow")} == {klass}

        exporter.queue(team_a, "hoard", 20)               # A bursts: its third replica
        limited = wait_for(                               # would fit only on the spare
            lambda: (c := condition(get_ie(crds, team_a, "hoard")["status"],
                                    "ScalingLimited"))["status"] == "True" and c,
            timeout=60, what="A's burst limited by capacity")
        assert limited["reason"] == "InsufficientCapacity", limited
        settle_autoscaler(e2e, team_a, "hoard")           # and nothing more happens
        b = get_job(crds, namespace, "b-borrow")["status"]
        assert b["phase"] == "Running" and not b.get("preemption"), b
        assert get_ie(crds, team_a, "hoard")["status"]["standby"].get("reclaim") is None

        if not isinstance(e2e, Operator) or e2e.proc is None:
            return  # the chart's Deployment: its flags are the chart's values
        e2e.stop()
        e2e.extra_args, kept = (*e2e.extra_args, "--standby-domains-per-namespace", "0"), \
            e2e.extra_args
        try:
            e2e.start()
            wait_for(lambda: e2e.readiness().get("ok"), timeout=60,
                     what="the operator restarted with the cap at 0 ready")
            capped = wait_status(crds, team_a, "hoard", "no standby under the admin's cap",
                                 standby=lambda held: held["domains"] == [])
            assert condition(capped, "Standby")["reason"] == "NamespaceLimit", capped
            assert get_job(crds, namespace, "b-borrow")["status"]["phase"] == "Running"
        finally:
            e2e.stop()
            e2e.extra_args = kept
            e2e.start()
    finally:
        delete_all(crds, "ie", team_a)
        crds.kubectl("delete", "tj", "--all", "-n", namespace, "--wait=true", "--timeout=60s",
                     check=False)
        crds.kubectl("delete", "priorityclass", klass, "--ignore-not-found")
