"""Kueue and MultiKueue end to end: three sandboxes side by side (a manager and two regions,
each a real control plane with KWOK Trn2 UltraServers, its own Kueue manager built from the
Go module, and its own operator), wired by `goodput sandbox connect`.

- A TrainingJob submitted on the manager runs in the region whose Kueue admits it, and its
  status (saying which cluster) appears on the manager; with that region full the next one
  goes to the other; deleting it on the manager removes it from its region.
- In one region, under a ClusterQueue's quota: a job waits while the quota is used, a
  higher-priority Workload's preemption makes the running one checkpoint and requeue, and
  queued jobs start as quota frees; a Workload the cluster refuses (an admin's admission
  policy) is said on the job, which runs nothing.
- A 5-replica endpoint split over the two regions; most of one region's nodes fail: its
  replicas that cannot be placed there again move to the other region within
  failoverSeconds, and the manager's status shows both regions. Its requests go through a
  real HAProxy the manager's operator programs (`--haproxy-runtime-api`): they follow the
  weights it derives from each region's ready replicas, the failing region is drained
  (no request reaches it), and it comes back after trafficReturnSeconds, in steps.
"""

from __future__ import annotations

import collections
import json
import shutil
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from goodput_operator.controllers.routing import read
from goodput_operator.resources.workload import (
    API_VERSION,
    MULTIKUEUE,
    PREBUILT_LABEL,
    QUEUE_LABEL,
)
from goodput_operator.sandbox import cluster as sandbox_cluster
from goodput_operator.sandbox import kueue
from goodput_operator.sandbox.entry import Entry
from goodput_operator.sandbox.haproxy import HAProxy
from goodput_operator.sdk import Reporter
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    TRN2_TYPE,
    Audited,
    Operator,
    apply,
    chart_account,
    get_job,
    job_pods,
    training_job,
    trn2_group_spec,
    wait_phase,
)
from tests.e2e.test_recovery import env_of, worker_token

KUEUE_BUILD_SECONDS = 1200
"""How long the module's first test may wait, in its sandboxes' setup, for `make test` to
finish building Kueue (its lock: 14 min on a cold 2-core machine beside both lanes, seen
when the fleet lane reached this module at 32 min and Kueue was ready at 40 min); on top
of the suite's per-test timeout, which is for a hang, not for a build."""
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600 + KUEUE_BUILD_SECONDS)]
GROUP = "trn2-pool"  # the same group name in every cluster (the manager's: counting only)
CHIPS = "aws.amazon.com/neuron"
JOB_CHIPS = 64  # every job here: 4 workers x 16 chips, one UltraServer
NAMES = ("gp-mk-manager", "gp-mk-a", "gp-mk-b")


@dataclass
class Region:
    name: str
    cluster: Cluster
    operator: Operator


@dataclass
class Regions:
    manager: Region
    workers: list[Region] = field(default_factory=list)
    routing_dir: Path = Path()  # where the manager's operator finds the proxy's socket

    def all(self) -> list[Region]:
        return [self.manager, *self.workers]

    def worker(self, name: str) -> Region:
        return next(r for r in self.workers if r.name == name)


def quota(name: str, chips: int, checks: list[str] | None = None) -> dict[str, Any]:
    """A ClusterQueue of CHIPS Trainium2 chips (and their EFA interfaces) on flavor trn2;
    lower priorities are preempted within it."""
    spec: dict[str, Any] = {
        "namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [{"coveredResources": ["cpu", CHIPS, "vpc.amazonaws.com/efa"],
                            "flavors": [{"name": "trn2", "resources": [
                                {"name": "cpu", "nominalQuota": 10_000},
                                {"name": CHIPS, "nominalQuota": chips},
                                {"name": "vpc.amazonaws.com/efa", "nominalQuota": chips}]}]}]}
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": name}, "spec": spec}


def local_queue(name: str, cluster_queue: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue}}


FLAVOR = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
          "metadata": {"name": "trn2"},
          "spec": {"nodeLabels": {"node.kubernetes.io/instance-type": TRN2_TYPE}}}


@pytest.fixture(scope="module")
def regions(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory,
            audited_elsewhere: Audited) -> Iterator[Regions]:
    """The manager and two regions, each with Kueue and an operator named after it, acting
    with the chart's ServiceAccount (what it did there is audited with the rest, before
    the sandboxes go); the regions' ClusterQueue `regional` holds one job's chips, the
    manager's `global` four and sends through MultiKueue to either region."""
    if not cluster.is_sandbox:
        pytest.skip("needs sandboxes of its own (three control planes side by side)")
    logs = tmp_path_factory.mktemp("multicluster")
    routing_dir = Path(tempfile.mkdtemp(prefix="gp-mk-proxy-"))  # a Unix socket's path: short
    boxes = [sandbox_cluster.Sandbox(name) for name in NAMES]
    started: list[Region] = []
    try:
        for box in boxes:
            if box.is_running():
                sandbox_cluster.down(box)
            sandbox_cluster.up(box, "trn2")
            kueue.start(box)
            here = Cluster(box.kubeconfig, is_sandbox=True, sandbox_name=box.name)
            here.kubectl("apply", "--server-side", "-f",
                         str(Path(__file__).resolve().parents[2] / "crds"))
            sandbox_cluster.wait_established(box.kubeconfig, "crd/trainingjobs.goodput.dev",
                                             "crd/inferenceendpoints.goodput.dev")
            apply(here, {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
                         "metadata": {"name": GROUP}, "spec": trn2_group_spec(
                             nodeSelector={"node.kubernetes.io/instance-type": TRN2_TYPE},
                             quarantine={"notReadyGraceSeconds": 3,
                                         "maxUnavailable": "100%"})})
            apply(here, FLAVOR)
            account = chart_account(here, logs / f"{box.name}.kubeconfig")
            routed = ("--haproxy-runtime-api", f"unix:{routing_dir / 'admin.sock'}") \
                if box is boxes[0] else ()
            operator = Operator(here, logs / f"{box.name}.log", account,
                                extra_args=("--cluster-name", box.name, *routed))
            operator.start()
            started.append(Region(box.name, here, operator))
        kueue.connect(boxes[0], boxes[1:])
        apply(started[0].cluster, quota("global", 4 * JOB_CHIPS, [kueue.ALL_WORKERS]))
        for region in started[1:]:
            apply(region.cluster, quota("regional", JOB_CHIPS))
        yield Regions(started[0], started[1:], routing_dir)
    finally:
        for region in started:
            region.operator.stop()
        for box in boxes:
            if box.audit_log.exists():
                audited_elsewhere.read(box.audit_log)
            sandbox_cluster.down(box)
        shutil.rmtree(routing_dir, ignore_errors=True)


@pytest.fixture
def space(regions: Regions) -> Iterator[str]:
    """One namespace in every cluster (MultiKueue creates its copies in the same one),
    with LocalQueue `team` (manager: global; regions: regional)."""
    namespace = f"mk-{uuid.uuid4().hex[:8]}"
    for region in regions.all():
        region.cluster.kubectl("create", "namespace", namespace)
        apply(region.cluster, local_queue(
            "team", "global" if region is regions.manager else "regional", namespace))
    yield namespace
    for region in regions.all():
        region.cluster.kubectl("delete", "tj,ie", "--all", "-n", namespace, "--wait=true",
                               "--timeout=60s", check=False)
        region.cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def queued_job(name: str, queue: str = "team", **spec: Any) -> dict[str, Any]:
    body = training_job(name, GROUP, JOB_CHIPS // 16, **spec)
    body["metadata"]["labels"] = {QUEUE_LABEL: queue}
    return body


def exists(cluster: Cluster, kind: str, namespace: str, name: str) -> bool:
    return cluster.kubectl("get", kind, name, "-n", namespace, check=False).returncode == 0


def status_of(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_job(cluster, namespace, name).get("status") or {})


def admitted(cluster: Cluster, namespace: str, name: str) -> tuple[str, str]:
    found = {c["type"]: c for c in status_of(cluster, namespace, name).get("conditions", [])}
    condition = found.get("Admitted") or {}
    return condition.get("reason", ""), condition.get("message", "")


def test_a_job_submitted_on_the_manager_runs_in_a_region_with_room_and_reports_there(
        regions: Regions, space: str) -> None:
    manager = regions.manager.cluster
    apply(manager, queued_job("first", managedBy=MULTIKUEUE), space)
    running = wait_for(lambda: (s := status_of(manager, space, "first")).get(
        "phase") == "Running" and s.get("cluster") and s, timeout=90,
        what="the first job running somewhere, its status on the manager")
    region_a = regions.worker(running["cluster"])
    region_b = next(r for r in regions.workers if r is not region_a)
    # the region's copy is the one that runs: its pods, its nodes, the same status
    there = wait_phase(region_a.cluster, space, "first", "Running")
    assert there["status"]["cluster"] == region_a.name
    assert len(job_pods(region_a.cluster, space, "first")) == 4
    assert not exists(region_b.cluster, "tj", space, "first")
    assert running["placement"]["domains"] == there["status"]["placement"]["domains"]
    assert not job_pods(manager, space, "first")  # the manager runs nothing itself

    # region A's quota is used up: the next job goes to region B
    apply(manager, queued_job("second", managedBy=MULTIKUEUE), space)
    second = wait_for(lambda: (s := status_of(manager, space, "second")).get(
        "phase") == "Running" and s, timeout=90, what="the second job running")
    assert second["cluster"] == region_b.name
    wait_phase(region_b.cluster, space, "second", "Running")

    # both full: a third waits on the manager, and says why
    apply(manager, queued_job("third", managedBy=MULTIKUEUE), space)
    waiting = wait_for(lambda: (s := status_of(manager, space, "third")).get(
        "phase") == "Pending" and s, timeout=30, what="the third job waiting")
    assert "waiting for MultiKueue" in waiting["message"], waiting
    assert not waiting.get("cluster")

    # deleting the first on the manager removes it from region A; the third takes its room
    manager.kubectl("delete", "tj", "first", "-n", space)
    wait_for(lambda: not exists(region_a.cluster, "tj", space, "first"), timeout=60,
             what="the first job gone from its region")
    wait_for(lambda: not job_pods(region_a.cluster, space, "first"), timeout=60,
             what="its pods gone")
    third = wait_for(lambda: (s := status_of(manager, space, "third")).get(
        "phase") == "Running" and s, timeout=90, what="the third job running")
    assert third["cluster"] == region_a.name

    # a job that ends in its region ends on the manager too
    finish(region_b, space, "second")
    done = wait_for(lambda: (s := status_of(manager, space, "second")).get(
        "phase") == "Succeeded" and s, timeout=60, what="the second job Succeeded on the manager")
    assert done["cluster"] == region_b.name

    def finished() -> list[dict[str, Any]]:
        workloads = json.loads(manager.kubectl("get", "workloads", "-n", space, "-o", "json")
                               .stdout)["items"]
        return [w for w in workloads if any(c["type"] == "Finished" and c["status"] == "True"
                                            for c in w["status"].get("conditions", []))]
    # the job's status is written before its Workload is finished (one pass, two writes):
    # read right after the status, the Workload was not finished yet once (a flake)
    wait_for(lambda: finished(), timeout=30, what="the second job's Workload finished")
    assert len(finished()) == 1


def finish(region: Region, namespace: str, job: str) -> None:
    """Every worker of JOB exits 0 (KWOK plays the kubelet)."""
    from goodput_operator.sandbox import faults

    for pod in job_pods(region.cluster, namespace, job):
        faults.succeed_pod(sandbox_cluster.Sandbox(region.name), pod["metadata"]["name"],
                           namespace)


def test_under_quota_a_job_waits_is_preempted_with_a_checkpoint_and_starts_when_quota_frees(
        regions: Regions, space: str) -> None:
    region = regions.workers[0]
    here = region.cluster
    apply(here, quota("solo", JOB_CHIPS))
    apply(here, local_queue("solo", "solo", space))
    checkpoint = {"dir": "/fsx/ckpt"}
    apply(here, queued_job("low", "solo", checkpoint=checkpoint), space)
    low = wait_phase(here, space, "low", "Running", timeout=60)
    assert low["status"]["workload"].startswith("trainingjob-low-")
    assert admitted(here, space, "low")[0] == "Admitted"
    pods = job_pods(here, space, "low")
    assert all(p["spec"]["nodeSelector"]["node.kubernetes.io/instance-type"] == TRN2_TYPE
               for p in pods), "placed on the admitted flavor's nodes"

    apply(here, queued_job("next", "solo"), space)  # no quota left: it waits, no pods
    wait_for(lambda: admitted(here, space, "next")[0] == "Queued", timeout=30,
             what="next queued")
    assert "insufficient unused quota" in admitted(here, space, "next")[1]
    assert not job_pods(here, space, "next")
    assert status_of(here, space, "next")["phase"] == "Pending"

    reporter = Reporter(region.operator.report_url,
                        worker_token(here, space, pods[0]["metadata"]["name"]))
    reporter.commit_checkpoint(100, "/fsx/ckpt/step-100")
    # a job of a higher class (the admin's WorkloadPriorityClass; a typed spec.priority
    # never reaches Kueue): Kueue evicts low, which is asked to save, saves, and stops
    urgent_class = f"urgent-{space}"
    apply(here, {"apiVersion": API_VERSION, "kind": "WorkloadPriorityClass",
                 "metadata": {"name": urgent_class}, "value": 100})
    apply(here, queued_job("urgent", "solo", priorityClassName=urgent_class), space)
    wait_for(lambda: status_of(here, space, "urgent").get("workload"), timeout=30,
             what="urgent's Workload")
    urgent_wl = json.loads(here.kubectl("get", "workload", "-n", space, "-o", "json",
                                        status_of(here, space, "urgent")["workload"]).stdout)
    assert urgent_wl["spec"]["priority"] == 100
    assert urgent_wl["spec"]["priorityClassRef"] == {
        "group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": urgent_class}
    wait_for(lambda: (status_of(here, space, "low").get("preemption") or {}).get(
        "by") == "Kueue", timeout=30, what="low asked to checkpoint")
    answer = reporter.report_step(150)
    assert answer["save"]["reason"] == "Preemption"
    reporter.commit_checkpoint(150, "/fsx/ckpt/step-150")
    requeued = wait_phase(here, space, "low", "Recovering", timeout=60)["status"]
    incident = requeued["incidents"][-1]
    assert (incident["cause"], incident["action"]) == ("Preemption", "requeue")
    assert "evicted from ClusterQueue solo" in incident["message"]
    preempted = {c["type"]: c for c in requeued["conditions"]}["Preempted"]
    assert (preempted["status"], preempted["reason"]) == ("True", "Requeued")
    assert "evicted by Kueue" in preempted["message"]  # the phase's message moves on: the
    # requeue, the quota given back once the workers are gone, then Kueue's queue again
    wait_phase(here, space, "urgent", "Running", timeout=60)
    assert not job_pods(here, space, "low")
    assert status_of(here, space, "next")["phase"] == "Pending"

    # quota frees twice: the two waiting jobs start one after the other, and low resumes
    # from the checkpoint it saved when evicted
    finish(region, space, "urgent")
    wait_phase(here, space, "urgent", "Succeeded", timeout=30)
    first = wait_for(lambda: next((n for n in ("low", "next") if status_of(
        here, space, n).get("phase") == "Running"), None), timeout=60,
        what="a queued job running once quota frees")
    other = "next" if first == "low" else "low"
    assert status_of(here, space, other)["phase"] in ("Pending", "Recovering")
    if first == "low":
        resumed_from(here, space)
    finish(region, space, first)
    wait_phase(here, space, other, "Running", timeout=60)
    if other == "low":
        resumed_from(here, space)


def resumed_from(here: Cluster, namespace: str) -> None:
    """The evicted job runs again: its second attempt, from the step it saved."""
    low = get_job(here, namespace, "low")
    assert low["status"]["restarts"] == 1
    env = env_of(job_pods(here, namespace, "low")[0])
    assert (env["GOODPUT_RESTART"], env["GOODPUT_RESUME_STEP"]) == ("1", "150")


def closed_queue(namespace: str) -> list[dict[str, Any]]:
    """A cluster admin's ValidatingAdmissionPolicy (and its binding, for NAMESPACE alone)
    that refuses every Workload sent to queue `closed`."""
    name = f"closed-queue-{namespace}"
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": name},
         "spec": {"failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [{
                      "apiGroups": ["kueue.x-k8s.io"], "apiVersions": ["*"],
                      "operations": ["CREATE"], "resources": ["workloads"]}]},
                  "validations": [{"expression": "object.spec.queueName != 'closed'",
                                   "message": "queue closed takes no new work"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchLabels": {
                      "kubernetes.io/metadata.name": namespace}}}}}]


def test_a_workload_the_cluster_refuses_is_said_on_the_job_which_runs_nothing(
        regions: Regions, space: str) -> None:
    here = regions.workers[1].cluster
    apply(here, local_queue("closed", "regional", space))
    policy = closed_queue(space)
    for doc in policy:
        apply(here, doc)
    try:
        probe = {"apiVersion": API_VERSION, "kind": "Workload",
                 "metadata": {"name": "probe", "namespace": space},
                 "spec": {"queueName": "closed", "podSets": [{"name": "main", "count": 1,
                          "template": {"spec": {"containers": [{"name": "c",
                                                                "image": "none"}]}}}]}}
        wait_for(lambda: "takes no new work" in here.kubectl(
            "create", "--dry-run=server", "-f", "-", input_text=json.dumps(probe),
            check=False).stderr, timeout=30, what="the policy in force")
        apply(here, queued_job("refused", "closed"), space)
        _, message = wait_for(
            lambda: (said := admitted(here, space, "refused"))[0] == "WorkloadRefused" and said,
            timeout=60, what="the refusal said on the job")
        assert "queue closed takes no new work" in message, message
        status = status_of(here, space, "refused")
        assert status["phase"] == "Pending" and "takes no new work" in status["message"]
        assert not job_pods(here, space, "refused")
        workloads = json.loads(here.kubectl("get", "workloads", "-n", space, "-o", "json")
                               .stdout)["items"]
        assert not workloads
    finally:
        for doc in reversed(policy):
            here.kubectl("delete", doc["kind"], doc["metadata"]["name"], "--ignore-not-found")


FAILOVER_SECONDS = 20
RETURN_SECONDS = 6  # trafficReturnSeconds: a healed region's hold, then its quarter steps


@pytest.fixture
def proxy(regions: Regions, space: str) -> Iterator[tuple[HAProxy, dict[str, Entry]]]:
    """The admin's HAProxy, at the socket the manager's operator was told: backend
    `<space>.chat`, a server per region at that region's entry (stood in by a process
    answering with its name: the regions' serving pods are KWOK's, which run nothing)."""
    entries = {r.name: Entry(r.name, 0.0, regions.routing_dir / f"{r.name}.log")
               for r in regions.workers}
    found = HAProxy(regions.routing_dir, {(space, "chat"): {
        n: e.address for n, e in entries.items()}})
    try:
        for entry in entries.values():
            entry.start()
        found.start()
        yield found, entries
    finally:
        found.stop()
        for entry in entries.values():
            entry.stop()


def answered(proxy: HAProxy, space: str, count: int) -> collections.Counter[str]:
    """Which region answered each of COUNT requests sent through the proxy."""
    seen: collections.Counter[str] = collections.Counter()
    for _ in range(count):
        request = urllib.request.Request(f"{proxy.url}/v1/completions", data=b"{}",
                                         headers={"Host": f"chat.{space}"})
        with urllib.request.urlopen(request, timeout=5) as response:
            seen[response.headers["X-Region"]] += 1
    return seen


def proxy_weight(proxy: HAProxy, space: str, region: str) -> int:
    return read(proxy.api).entries[(f"{space}.chat", region)].weight


def test_an_endpoint_split_over_two_regions_moves_away_from_the_one_that_fails(
        regions: Regions, space: str, proxy: tuple[HAProxy, dict[str, Entry]]) -> None:
    manager = regions.manager.cluster
    a, b = regions.workers
    haproxy = proxy[0]
    # a queue per region: on the manager through that region's admission check alone; in
    # each region, under the same name, a quota of four whole-UltraServer replicas
    for region in (a, b):
        apply(manager, quota(f"via-{region.name}", 16 * JOB_CHIPS, [region.name]))
        apply(manager, local_queue(f"to-{region.name}", f"via-{region.name}", space))
        apply(region.cluster, quota("serving", 4 * JOB_CHIPS))
        apply(region.cluster, local_queue(f"to-{region.name}", "serving", space))
    apply(manager, {
        "apiVersion": "goodput.dev/v1alpha1", "kind": "InferenceEndpoint",
        "metadata": {"name": "chat"},
        "spec": {"ultraServerGroup": GROUP, "model": {"name": "llama-70b"}, "replicas": 5,
                 "replicaShape": {"workers": 4, "acceleratorsPerWorker": 16},
                 "template": {"spec": {"containers": [{"name": "server",
                                                       "image": "example.com/serve:1"}]}},
                 "multiRegion": {"failoverSeconds": FAILOVER_SECONDS,
                                 "trafficReturnSeconds": RETURN_SECONDS, "regions": [
                                     {"name": a.name, "queue": f"to-{a.name}"},
                                     {"name": b.name, "queue": f"to-{b.name}"}]}}}, space)

    def endpoint() -> dict[str, Any]:
        return dict(json.loads(manager.kubectl("get", "ie", "chat", "-n", space, "-o", "json")
                               .stdout).get("status") or {})

    def by_region() -> dict[str, dict[str, Any]]:
        return {r["name"]: r for r in endpoint().get("regions") or []}

    def serving_both() -> dict[str, dict[str, Any]] | None:
        found = by_region()
        return found if endpoint().get("readyReplicas") == 5 and all(
            r.get("traffic") == "Serving" for r in found.values()) else None

    regions_now = wait_for(serving_both, timeout=120 + 2 * RETURN_SECONDS,
                           what="5 replicas ready over the regions, both serving traffic")
    assert {n: r["readyReplicas"] for n, r in regions_now.items()} == {a.name: 3, b.name: 2}
    assert {n: r["cluster"] for n, r in regions_now.items()} == {a.name: a.name,
                                                                  b.name: b.name}
    serving = {r.name: [e for e in endpoints_in(r.cluster, space)] for r in (a, b)}
    assert [len(v) for v in serving.values()] == [3, 2]  # one-replica endpoints, ready there
    def applied() -> dict[str, int] | None:
        """The weights, once the proxy uses those the status shows."""
        weights = {n: proxy_weight(haproxy, space, n) for n in (a.name, b.name)}
        shown = {n: r.get("trafficWeight") for n, r in by_region().items()}
        return weights if weights == shown else None

    def follow(weights: dict[str, int], count: int) -> None:
        """COUNT requests share out as WEIGHTS say (round robin: within one)."""
        seen = answered(haproxy, space, count)
        assert sum(seen.values()) == count
        for region, weight in weights.items():
            expected = count * weight / sum(weights.values())
            assert abs(seen[region] - expected) <= 1.5, (seen, weights)

    # the requests follow the weights, which follow the ready replicas (3 : 2), each
    # replica's share discounted by at most 15% for the entries' few milliseconds apart
    weights = wait_for(applied, timeout=10, what="the proxy using the status's weights")
    assert weights[a.name] == 256 and 0.85 <= weights[b.name] / 256 * 3 / 2 <= 1 / 0.85, \
        weights
    follow(weights, 40)

    # most of region A fails: the UltraServers of its three replicas, 12 of its 16 nodes
    used = sorted({node for e in serving[a.name] for g in e["status"]["groups"]
                   for node in g["nodes"]})
    assert len(used) == 12
    failed_at = time.monotonic()
    fail_nodes(a, used)
    wait_for(lambda: by_region()[a.name]["readyReplicas"] < 3, timeout=60,
             what="region A's replicas not ready")
    # its share of the requests falls with its ready replicas (to 0 if none was seen)
    wait_for(lambda: proxy_weight(haproxy, space, a.name) < weights[a.name], timeout=30,
             what="region A's weight in the proxy lowered")
    moved = wait_for(lambda: (r := by_region())[b.name]["readyReplicas"] == 4 and
                     endpoint().get("readyReplicas") == 5 and r, timeout=FAILOVER_SECONDS + 90,
                     what="two replicas moved to region B, five ready again")
    took = time.monotonic() - failed_at
    assert moved[a.name]["readyReplicas"] == 1  # the one its free UltraServer could host
    assert moved[a.name]["replicas"] == 1
    assert "not ready for" in moved[a.name]["message"]
    assert FAILOVER_SECONDS <= took <= FAILOVER_SECONDS + 90, took
    events = manager.kubectl("get", "events", "-n", space, "--field-selector",
                             "reason=ReplicaMoved", "-o", "json").stdout
    assert len(json.loads(events)["items"]) >= 2
    assert len(endpoints_in(b.cluster, space)) == 4
    status = endpoint()
    assert (status["replicas"], status["desiredReplicas"], status["readyReplicas"]) == (5, 5, 5)

    def quarter() -> bool:  # A's one replica against B's four, discounted as above
        found = by_region()
        return found[a.name].get("traffic") == "Serving" and found[b.name].get(
            "trafficWeight") == 256 and 0.85 <= found[a.name]["trafficWeight"] * 4 / 256 \
            <= 1 / 0.85

    # A serves again with its one replica: its share is 1 : 4
    wait_for(quarter, timeout=2 * RETURN_SECONDS + 30, what="region A serving at 1 : 4")
    follow(wait_for(applied, timeout=10, what="the proxy at the status's weights"), 20)

    # A's entry dies: the proxy's health check finds it down, the operator drains it, and
    # every request is answered by B (none lost: `answered` fails on an error)
    entries = proxy[1]
    entries[a.name].stop()
    drained = wait_for(lambda: (r := by_region()[a.name]).get("traffic") == "Drained" and r,
                       timeout=15, interval=0.1, what="region A drained")
    assert "health check" in drained["trafficReason"] and drained["trafficWeight"] == 0
    assert proxy_weight(haproxy, space, a.name) == 0
    assert answered(haproxy, space, 10) == {b.name: 10}
    healed_at = time.monotonic()
    entries[a.name].start()
    # back only after the hold, then in quarter steps, to its full share
    returning = wait_for(lambda: (r := by_region()[a.name]).get("traffic") == "Returning"
                         and r, timeout=15, interval=0.1, what="region A returning")
    assert returning["trafficWeight"] == 0 and "held back until" in returning["trafficReason"]
    wait_for(quarter, timeout=2 * RETURN_SECONDS + 15, what="region A back at its share")
    assert time.monotonic() - healed_at >= 2 * RETURN_SECONDS - 1
    follow(wait_for(applied, timeout=10, what="the proxy at the status's weights"), 20)
    reasons = [e["reason"] for e in json.loads(manager.kubectl(
        "get", "events", "-n", space, "-o", "json").stdout)["items"]]
    assert "TrafficShifted" in reasons and "TrafficReturned" in reasons


def endpoints_in(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    """The ready one-replica endpoints MultiKueue placed in CLUSTER."""
    items = json.loads(cluster.kubectl("get", "ie", "-n", namespace, "-o", "json").stdout)[
        "items"]
    return [e for e in items if (e.get("status") or {}).get("readyReplicas") == 1]


def fail_nodes(region: Region, nodes: list[str]) -> None:
    from goodput_operator.sandbox import faults

    faults.fail_node(sandbox_cluster.Sandbox(region.name), *nodes)


def test_a_job_cannot_borrow_another_jobs_admitted_workload(regions: Regions,
                                                            space: str) -> None:
    """TENANCY.md rule 3 with the real Kueue: an 8-worker job that names another job's
    admitted Workload by the label MultiKueue uses is told it is not its own and gets no
    pod; the owner runs on, and its Workload is never finished by the borrower."""
    here = regions.workers[0].cluster
    apply(here, queued_job("small"), space)
    lent = wait_phase(here, space, "small", "Running", timeout=60)["status"]["workload"]
    big = training_job("big", GROUP, 8)
    big["metadata"]["labels"] = {PREBUILT_LABEL: lent}
    apply(here, big, space)
    wait_for(lambda: admitted(here, space, "big")[0] == "WorkloadNotOwned", timeout=30,
             what="the borrowed Workload refused")
    assert "belongs to TrainingJob small" in admitted(here, space, "big")[1]
    assert not job_pods(here, space, "big")
    here.kubectl("delete", "tj", "big", "-n", space, "--wait=true")
    wl = json.loads(here.kubectl("get", "workload", lent, "-n", space, "-o", "json").stdout)
    assert not any(c["type"] == "Finished" for c in wl["status"].get("conditions", []))
    assert status_of(here, space, "small")["phase"] == "Running"


def test_a_waiting_jobs_workload_is_made_again_when_its_pods_change(regions: Regions,
                                                                    space: str) -> None:
    """As Kueue does for the jobs it integrates: a queued job resized while it waits gets a
    new Workload counting its pods now (the old one would admit the old size)."""
    here = regions.workers[1].cluster
    apply(here, queued_job("holder"), space)  # takes the region's quota: later waits
    wait_phase(here, space, "holder", "Running", timeout=60)
    apply(here, queued_job("later"), space)
    name = wait_for(lambda: status_of(here, space, "later").get("workload"), timeout=30,
                    what="later's Workload")

    def workload() -> dict[str, Any] | None:
        found = here.kubectl("get", "workload", name, "-n", space, "-o", "json", check=False)
        return json.loads(found.stdout) if found.returncode == 0 else None
    first = wait_for(workload, timeout=30, what="later's Workload")
    assert [s["count"] for s in first["spec"]["podSets"]] == [JOB_CHIPS // 16]
    here.kubectl("patch", "tj", "later", "-n", space, "--type=merge",
                 "-p", '{"spec": {"workers": 2}}')
    again = wait_for(lambda: (w := workload()) and w["metadata"]["uid"] !=
                     first["metadata"]["uid"] and w, timeout=30, what="a new Workload")
    assert [s["count"] for s in again["spec"]["podSets"]] == [2]
