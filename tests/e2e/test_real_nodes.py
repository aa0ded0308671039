"""Real workers on real nodes: kubelets, containerd and runc beside the simulated fleet run
the example PyTorch trainer (examples/trainer/train.py) from the sandbox's worker image,
managed by the operator running in-cluster (the chart's Deployment, tests/e2e/realnodes.py).
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from goodput_operator import __version__, names
from goodput_operator.autoscaling import prometheus as promql
from goodput_operator.sandbox import faults, images, operator_image, realnode
from goodput_operator.sandbox.prometheus import Prometheus
from goodput_operator.topology.record import nodes_of, ranks_of
from tests import helm
from tests.conftest import wait_for
from tests.e2e import incluster
from tests.e2e.conftest import apply, get_job, job_pods, lift_quarantine
from tests.e2e.realnodes import (
    SD_READER,
    SPARE,
    STEPS,
    US0,
    Real,
    _running_at,
    events,
    heal,
    logs,
    nodes_taken,
    pod_tails,
    results,
    sandbox,
    succeeded,
    trainer_job,
)

pytestmark = pytest.mark.e2e
LEASE_SECONDS = 15  # the operator's default Lease duration


def test_the_chart_runs_the_operator_in_cluster_as_users_run_it(real: Real) -> None:
    """`make image` then `helm install`: two Ready replicas on the system nodes, one leading,
    the chart's hardened security context in force, /metrics through the Service."""
    operator = real.operator
    pods = operator.pods()
    assert len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)
    assert {p["spec"]["nodeName"] for p in pods} == {"system-0", "system-1"}, \
        "anti-affinity: one replica per node"
    leader = operator.leader()
    assert leader is not None
    standby = next(p for p in pods if p["metadata"]["name"] != leader["metadata"]["name"])
    assert standby["metadata"]["labels"].get(names.LEADER_LABEL) != "true"
    log = real.cluster.kubectl("logs", leader["metadata"]["name"], "-n",
                               operator.namespace).stdout
    assert "became the leader" in log and "initial sync:" in log, log[-2000:]
    container = leader["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert all(container[probe]["httpGet"]["path"] in ("/healthz", "/readyz")
               for probe in ("livenessProbe", "readinessProbe", "startupProbe"))

    def run(*command: str) -> Any:
        return real.cluster.kubectl("exec", leader["metadata"]["name"], "-n",
                                    operator.namespace, "--", *command, check=False)
    assert run("id", "-u").stdout.strip() == "65532", "not root"
    refused = run("touch", "/usr/local/lib/written")
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    # /metrics of both replicas through the metrics Service (kube-proxy's rules, from here)
    url = f"http://{operator.service_ip('metrics')}:9090/metrics"
    scraped = wait_for(lambda: _fetch(url), timeout=30, what=f"{url} through the Service")
    assert "goodput_reports_total" in scraped or "goodput_trainingjobs" in scraped


def _fetch(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return None


def test_a_real_job_trains_checkpoints_and_succeeds_with_its_ranks_in_agreement(
        real: Real, reference: dict[str, Any]) -> None:
    job, pods, final = reference["job"], reference["pods"], reference["results"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == US0, "one UltraServer, all 4 nodes"
    assert all(p["status"]["phase"] == "Succeeded" for p in pods)
    assert sorted(final) == [0, 1, 2, 3]
    assert len({r["fingerprint"] for r in final.values()}) == 1, final
    assert job["status"]["checkpoint"]["latest"]["step"] == STEPS
    latest = job["status"]["checkpoint"]["latest"]
    from goodput_operator.sdk import checkpoint

    assert latest["digest"] == checkpoint.digest(latest["path"].replace(
        "/shared", str(realnode.SHARED_DIR), 1)), "the committed digest is of what is on disk"
    assert f"checkpoint step {STEPS} committed" in reference["trainer_log"]
    assert f"FINAL step={STEPS}" in reference["trainer_log"]
    assert "hostfile: all 4 names resolve" in reference["trainer_log"]  # namespace-relative
    # the workers reported to the leader through the reports Service, by its DNS name
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["GOODPUT_REPORT_URL"] == (f"http://{real.operator.name}-reports."
                                         f"{real.operator.namespace}.svc:8081")
    # every report arrived with the pod's own projected token (no token was minted here)
    from prometheus_client.parser import text_string_to_metric_families

    answered = {(s.labels["kind"], s.labels["code"]): s.value
                for family in text_string_to_metric_families(real.operator.metrics())
                for s in family.samples if s.name == "goodput_reports_total"}
    assert answered.get(("checkpoint", "200"), 0) >= STEPS // 10, answered
    assert answered.get(("step", "200"), 0) >= 4 * STEPS, answered
    assert not {code for _, code in answered if code != "200"}, answered


def token_claims(real: Real, namespace: str, pod: str) -> dict[str, Any]:
    token = real.cluster.kubectl("exec", pod, "-n", namespace, "--", "cat",
                                 "/var/run/secrets/goodput.dev/report/token").stdout.strip()
    payload = token.split(".")[1]
    padded = payload + "=" * (-len(payload) % 4)
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(padded))
    return claims


def test_silent_corruption_on_a_real_replica_rolls_back_to_the_verified_checkpoint(
        real: Real, reference: dict[str, Any], ns: str) -> None:
    name = f"sdc-{uuid.uuid4().hex[:6]}"
    bad = US0[1]
    apply(real.cluster, trainer_job(real, name, "--step-seconds", "0.5", "--corrupt-at-step",
                                    "25", "--corrupt-node", bad), ns)
    try:
        job = wait_for(lambda: _running_at(real, ns, name, 1), timeout=240,
                       what="the gang running again after the corruption")
        incident = job["status"]["incidents"][-1]
        assert incident["cause"] == "SilentDataCorruption" and bad in incident["nodes"], \
            (job["status"]["incidents"], job["status"].get("sdc"), pod_tails(real, ns, name),
             events(real.cluster.kubeconfig, "-n", ns))
        assert "rolling back to step 20" in incident["message"], incident["message"]
        assert bad not in {r["node"] for r in ranks_of(job["status"]["placement"])}
        succeeded(real, ns, name)
    finally:
        lift_quarantine(real.cluster, bad)
    pods = job_pods(real.cluster, ns, name)
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["GOODPUT_RESUME_STEP"] == "20"
    assert "resumed from step 20" in logs(real, ns, pods[0]["metadata"]["name"])
    final = results(name)
    assert {r["fingerprint"] for r in final.values()} == \
        {reference["results"][0]["fingerprint"]}, "the replay from step 20 is clean"


def training(real: Real, ns: str, name: str) -> tuple[dict[str, Any], dict[int, str]]:
    """The example trainer started as NAME (a step every 2 s): its first committed
    checkpoint, and its ranks' nodes."""
    apply(real.cluster, trainer_job(real, name, "--step-seconds", "2"), ns)
    committed = wait_for(lambda: (get_job(real.cluster, ns, name).get("status") or {})
                         .get("checkpoint", {}).get("latest"), timeout=180,
                         what="a first committed checkpoint")
    ranks = {r["rank"]: r["node"] for r in
             ranks_of(get_job(real.cluster, ns, name)["status"]["placement"])}
    return committed, ranks


def assert_rank_2_on_the_spare(job: dict[str, Any], ranks: dict[int, str]) -> None:
    """Rank 2 moved to the spare; every other rank kept its node."""
    moved = {r["rank"]: r["node"] for r in ranks_of(job["status"]["placement"])}
    assert moved[2] == SPARE and {k: v for k, v in moved.items() if k != 2} == \
        {k: v for k, v in ranks.items() if k != 2}


def test_a_real_node_failure_resumes_from_the_last_committed_checkpoint_on_the_spare(
        real: Real, reference: dict[str, Any], ns: str) -> None:
    name = f"fail-{uuid.uuid4().hex[:6]}"
    committed, ranks = training(real, ns, name)
    assert sorted(ranks.values()) == US0, ("the gang fills the first UltraServer",
                                           nodes_taken(real))
    victim = ranks[2]
    pod = next(p for p in job_pods(real.cluster, ns, name)
               if p["metadata"]["labels"][names.RANK_LABEL] == "2")
    claims = token_claims(real, ns, pod["metadata"]["name"])
    assert claims["aud"] == [names.REPORT_AUDIENCE]
    assert claims["kubernetes.io"]["pod"]["name"] == pod["metadata"]["name"]
    assert claims["kubernetes.io"]["node"]["name"] == victim, "minted for the real kubelet"
    sandbox(real, "fail-node", victim)
    try:
        job = wait_for(lambda: _running_at(real, ns, name, 1), timeout=240,
                       what="the gang running again after the node failure")
        assert_rank_2_on_the_spare(job, ranks)
        incident = job["status"]["incidents"][-1]
        assert incident["cause"] == "NodeFailure" and victim in incident["nodes"]
        node = json.loads(real.cluster.kubectl("get", "node", victim, "-o", "json").stdout)
        assert any(t["key"] == names.QUARANTINE_TAINT for t in node["spec"].get("taints", []))
        done = succeeded(real, ns, name)
    finally:
        heal(real, victim)
    resumed = int(next(e["value"] for e in job_pods(real.cluster, ns, name)[0]["spec"]
                       ["containers"][0]["env"] if e["name"] == "GOODPUT_RESUME_STEP"))
    assert resumed >= committed["step"], "resumed from the newest committed checkpoint"
    pods = job_pods(real.cluster, ns, name)
    assert all(p["metadata"]["labels"][names.RESTART_LABEL] == "1" for p in pods)
    assert f"resumed from step {resumed}" in logs(real, ns, pods[0]["metadata"]["name"])
    final = results(name)
    assert {r["resumedFrom"] for r in final.values()} == {resumed}
    assert {r["fingerprint"] for r in final.values()} == \
        {reference["results"][0]["fingerprint"]}, "equal to the uninterrupted run, bit for bit"
    assert done["status"]["incidents"][-1].get("detectionSeconds") is not None


def test_a_spot_notice_saves_then_moves_the_rank_and_training_resumes_from_that_save(
        real: Real, reference: dict[str, Any], ns: str) -> None:
    """The AWS Node Termination Handler's Spot taint on rank 2's node (EC2's two-minute
    warning): the workers are asked to save, and once that checkpoint commits, rank 2
    moves to the spare before the node goes; the gang resumes from that save and ends
    equal to the uninterrupted run. The node is not quarantined: nothing is wrong with
    it."""
    name = f"notice-{uuid.uuid4().hex[:6]}"
    first, ranks = training(real, ns, name)
    victim = ranks[2]
    sandbox(real, "notice-node", victim, "--kind", "spot")
    try:
        job = wait_for(lambda: _running_at(real, ns, name, 1), timeout=240,
                       what="the gang running again after the notice")
        assert_rank_2_on_the_spare(job, ranks)
        incident = job["status"]["incidents"][-1]
        assert incident["cause"] == "Notice" and incident["nodes"] == [victim], incident
        assert "SpotInterruption notice" in incident["message"], incident
        saved = incident["resumeFrom"]["step"]
        assert saved > first["step"] and f"saved at step {saved}" in incident["message"]
        assert not job["status"].get("notice"), "the notice is done with once the rank moved"
        node = json.loads(real.cluster.kubectl("get", "node", victim, "-o", "json").stdout)
        assert not any(t["key"] == names.QUARANTINE_TAINT
                       for t in node["spec"].get("taints", [])), "nothing is wrong with it"
        done = succeeded(real, ns, name)
    finally:
        heal(real, victim)
    assert done["status"]["goodput"]["lostByCause"].keys() == {"Notice"}
    final = results(name)
    assert {r["resumedFrom"] for r in final.values()} == {saved}
    assert {r["fingerprint"] for r in final.values()} == \
        {reference["results"][0]["fingerprint"]}, "equal to the uninterrupted run, bit for bit"


def test_a_real_hang_restarts_the_gang_and_training_resumes_from_the_last_checkpoint(
        real: Real, reference: dict[str, Any], ns: str) -> None:
    """Rank 1 stops before step 25's collective (a stuck device): every process stays
    alive and Running, the others wait in the all-reduce, no step is reported. The
    operator declares a hang after the window (20 s here), restarts the gang, and the
    run resumes from step 20's checkpoint and ends equal to the uninterrupted run."""
    name = f"hang-{uuid.uuid4().hex[:6]}"
    job = trainer_job(real, name, "--step-seconds", "0.5", "--hang-at-step", "25")
    job["spec"]["failurePolicy"]["hang"] = {"stepTimeMultiple": 10, "minSeconds": 20}
    apply(real.cluster, job, ns)
    wait_for(lambda: next((c for c in (get_job(real.cluster, ns, name).get("status") or {})
                           .get("conditions") or [] if c["type"] == "HangDetection"
                           and c["status"] == "True"), None), timeout=180,
             what="hang detection in force (steps reported)")
    running = wait_for(lambda: _running_at(real, ns, name, 1), timeout=240,
                       what="the gang running again after the hang")
    incident = running["status"]["incidents"][-1]
    assert incident["cause"] == "Hang" and incident["nodes"] == []
    assert incident["detectionSeconds"] >= 20, incident  # the last step -> the verdict
    assert "after step 24" in incident["message"], incident
    assert running["status"]["restartsByBudget"] == {"application": 1}
    done = succeeded(real, ns, name)
    assert done["status"]["incidents"][-1]["resumeFrom"]["step"] == 20
    final = results(name)
    assert {r["resumedFrom"] for r in final.values()} == {20}
    assert {r["fingerprint"] for r in final.values()} == \
        {reference["results"][0]["fingerprint"]}, "equal to the uninterrupted run, bit for bit"


def test_a_sharded_step_a_rank_died_writing_is_never_a_resume_point(
        real: Real, reference: dict[str, Any], ns: str) -> None:
    """Every rank saves its own part of each checkpoint; at step 30 rank 2 writes half its
    part and dies. Step 30 is never committed: the restart resumes from step 20, whose
    parts were all down, and the run ends equal to the uninterrupted one."""
    name = f"shard-{uuid.uuid4().hex[:6]}"
    apply(real.cluster, trainer_job(real, name, "--step-seconds", "0.5", "--sharded",
                                    "--die-writing-at-step", "30"), ns)
    done = succeeded(real, ns, name)
    incident = done["status"]["incidents"][0]
    assert incident["cause"] == "ApplicationError", incident
    assert 'exited with code 1: an application error (last words: "' in incident["message"] \
        and "rank 2: dying while writing my part of step 30" in incident["message"], \
        "the incident quotes the worker's last log line (its termination message)"
    assert incident["resumeFrom"]["step"] == 20, incident
    staged = realnode.SHARED_DIR / "checkpoints" / name / ".step-00000030.staging-a0"
    assert (staged / "rank-2.pt").read_bytes() == b"half a checkpoint"
    assert not (staged / ".goodput-shard-00002-done").exists()
    assert (realnode.SHARED_DIR / "checkpoints" / name / "step-00000020" /
            ".goodput-shard-00003-done").exists(), "step 20: every part down"
    final = results(name)
    assert {r["resumedFrom"] for r in final.values()} == {20}
    assert {r["fingerprint"] for r in final.values()} == \
        {reference["results"][0]["fingerprint"]}, "equal to the uninterrupted run, bit for bit"


def test_an_elastic_job_shrinks_to_a_consistent_world_and_grows_back_when_healed(
        real: Real, ns: str) -> None:
    """4 workers in one UltraServer (required), elastic down to 2 in steps of 2, no spare
    it could use: rank 3's node fails, the gang restarts as 2 workers that all see a world
    of 2; once the node is healed and the job has run growAfterSeconds at 2, it restarts
    as 4 again and trains on from the last checkpoint with a world of 4."""
    name = f"elastic-{uuid.uuid4().hex[:6]}"
    job = trainer_job(real, name, "--steps", "400", "--step-seconds", "0.5",
                      elastic={"minWorkers": 2, "step": 2, "growAfterSeconds": 10},
                      topology={"unit": "domain", "policy": "required"})
    apply(real.cluster, job, ns)
    wait_for(lambda: (get_job(real.cluster, ns, name).get("status") or {})
             .get("checkpoint", {}).get("latest"), timeout=180, what="a first checkpoint")
    ranks = {r["rank"]: r["node"] for r in
             ranks_of(get_job(real.cluster, ns, name)["status"]["placement"])}
    victim = ranks[3]
    sandbox(real, "fail-node", victim)
    try:
        small = wait_for(lambda: _running_at(real, ns, name, 1), timeout=240,
                         what="the gang running again, shrunk")
        assert small["status"]["incidents"][-1]["action"] == "shrink"
        assert small["status"]["workers"]["desired"] == 2
        worlds(real, ns, name, 1, expect=2)
    finally:
        heal(real, victim)
    big = wait_for(lambda: _running_at(real, ns, name, 2), timeout=240,
                   what="the gang grown back to 4 workers")
    incident = big["status"]["incidents"][-1]
    assert (incident["cause"], incident["action"]) == ("Resize", "grow"), incident
    assert sorted(nodes_of(big["status"]["placement"])) == sorted(ranks.values())
    assert big["status"].get("restartsByBudget") == {"infrastructure": 1}
    resumed = incident["resumeFrom"]["step"]
    wait_for(lambda: ((p := get_job(real.cluster, ns, name)["status"].get("progress") or {})
                      .get("restart") == 2 and p.get("step", 0) > resumed), timeout=120,
             what="steps of the grown gang past the checkpoint it resumed from")
    worlds(real, ns, name, 2, expect=4)


def test_a_real_straggler_is_named_with_its_node(real: Real, ns: str) -> None:
    """Rank 2 of the example trainer works 0.3 s longer each step (a throttled device):
    every rank still steps together (the all-reduce waits for it), but its own time per
    step, which the trainer reports as computeSeconds, gives it away."""
    name = f"slow-{uuid.uuid4().hex[:6]}"
    job = trainer_job(real, name, "--steps", "300", "--step-seconds", "0.3", "--slow-rank",
                      "2", "--slow-seconds", "0.3")
    job["spec"]["failurePolicy"]["straggler"] = {"minSteps": 8}
    apply(real.cluster, job, ns)

    def named() -> dict[str, Any] | None:
        status = get_job(real.cluster, ns, name).get("status") or {}
        return next((c for c in status.get("conditions") or [] if c["type"] == "Straggler"
                     and c["status"] == "True"), None)
    found = wait_for(named, timeout=180, what="the Straggler condition")
    ranks = {r["rank"]: r["node"] for r in
             ranks_of(get_job(real.cluster, ns, name)["status"]["placement"])}
    assert found["message"].startswith(f"rank 2 on {ranks[2]}: "), found
    assert "computeSeconds" in found["message"] and "rank 0" not in found["message"]


def worlds(real: Real, namespace: str, name: str, attempt: int, expect: int) -> None:
    """Every worker of ATTEMPT was told a world of EXPECT and its trainer runs in one."""
    pods = [p for p in job_pods(real.cluster, namespace, name)
            if p["metadata"]["labels"][names.RESTART_LABEL] == str(attempt)]
    assert len(pods) == expect
    for pod in pods:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert (env["WORLD_SIZE"], env["NNODES"]) == (str(expect), str(expect))
        wait_for(lambda pod=pod: f"world {expect}," in logs(real, namespace,
                                                             pod["metadata"]["name"]),
                 timeout=60, what=f"{pod['metadata']['name']}'s trainer in a world of {expect}")


def test_a_node_made_real_later_runs_containers_and_a_crash_kills_them(
        real: Real, ns: str) -> None:
    """`add-real-node` turns the next simulated node real; `fail-node --crash` kills every
    container on it (exit 137) while the node itself stays Ready."""
    sandbox(real, "add-real-node", "trn2-01-1")
    node = json.loads(real.cluster.kubectl("get", "node", "trn2-01-1", "-o", "json").stdout)
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert node["status"]["allocatable"]["aws.amazon.com/neuron"] == "16"
    assert node["metadata"]["labels"][realnode.REAL_LABEL] == "true"
    apply(real.cluster, {"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": "sleeper", "namespace": ns},
                         "spec": {"nodeName": "trn2-01-1", "restartPolicy": "Never",
                                  "containers": [{"name": "c", "image": images.WORKER_IMAGE,
                                                  "imagePullPolicy": "Never",
                                                  "command": ["sleep", "600"]}]}})

    def phase() -> str:
        return str(real.cluster.kubectl("get", "pod", "sleeper", "-n", ns, "-o",
                                        "jsonpath={.status.phase}").stdout)
    wait_for(lambda: phase() == "Running", timeout=60, what="the pod running")
    sandbox(real, "fail-node", "--crash", "trn2-01-1")
    wait_for(lambda: phase() == "Failed", timeout=60, what="the pod failed by the crash")
    code = real.cluster.kubectl("get", "pod", "sleeper", "-n", ns, "-o", "jsonpath="
                                "{.status.containerStatuses[0].state.terminated.exitCode}").stdout
    assert code == "137"
    assert faults.recovered(json.loads(real.cluster.kubectl(
        "get", "node", "trn2-01-1", "-o", "json").stdout)), "a crash is not a partition"


def test_deleting_the_leader_pod_mid_job_changes_nothing_for_the_job(
        real: Real, reference: dict[str, Any], ns: str) -> None:
    """The leader goes (a drain, a rollout): the standby leads within the Lease's duration,
    the workers' reports land on it through the same Service, and the job never restarts."""
    operator = real.operator
    name = f"lead-{uuid.uuid4().hex[:6]}"
    apply(real.cluster, trainer_job(real, name, "--step-seconds", "0.5"), ns)
    first = wait_for(lambda: _latest_step(real, ns, name), timeout=180,
                     what="a first committed checkpoint")
    old = operator.leader()
    assert old is not None
    gone = old["metadata"]["name"]
    real.cluster.kubectl("delete", "pod", gone, "-n", operator.namespace, "--wait=false")
    # the leader gives the Lease back on SIGTERM; whichever replica polls it first takes it:
    # the warm standby, or the ReplicaSet's replacement once its caches are synced
    wait_for(lambda: (found := operator.leader()) and found["metadata"]["name"] != gone,
             timeout=LEASE_SECONDS + 5, what="another replica leading within the Lease's duration")
    wait_for(lambda: (_latest_step(real, ns, name) or 0) > first, timeout=120,
             what="checkpoint reports landing on the new leader")
    done = succeeded(real, ns, name)
    assert done["status"].get("restarts", 0) == 0 and not done["status"].get("incidents")
    assert {r["fingerprint"] for r in results(name).values()} == \
        {reference["results"][0]["fingerprint"]}
    operator.wait_rolled_out()  # the ReplicaSet's new pod is the standby now


def test_helm_upgrade_to_a_new_image_and_setting_and_rollback_keep_a_running_job_running(
        real: Real, reference: dict[str, Any], ns: str) -> None:
    """The upgrade also lowers `reports.perJob` to 1 a second: the job's 4 workers, a step a
    second, are then asked for every 4th step (health.cadence) and skip the others, except
    the checkpoints' steps, whose votes verify them; the rollback asks for every step
    again. None of it restarts the job or changes what it computes."""
    operator = real.operator
    new_tag = f"{__version__}-next"
    incluster.build_and_load(real.box, new_tag)
    revision = int(json.loads(helm.helm("status", operator.release, "-n", operator.namespace,
                                        "-o", "json", kubeconfig=real.cluster.kubeconfig
                                        ).stdout)["version"])
    name = f"upg-{uuid.uuid4().hex[:6]}"
    apply(real.cluster, trainer_job(real, name, "--step-seconds", "1"), ns)
    wait_for(lambda: _latest_step(real, ns, name), timeout=180, what="a first checkpoint")
    operator.install(image=operator.values["image"] | {"tag": new_tag}, reports={"perJob": 1})
    assert {p["spec"]["containers"][0]["image"] for p in operator.pods()} == \
        {f"{operator_image.REPOSITORY}:{new_tag}"}
    wait_for(lambda: _progress(real, ns, name).get("every", 1) >= 4, timeout=60,
             what="status.progress.every at 4 or more under reports.perJob=1")
    assert (get_job(real.cluster, ns, name)["status"]).get("restarts", 0) == 0
    operator.rollback(revision)
    assert {p["spec"]["containers"][0]["image"] for p in operator.pods()} == \
        {f"{operator_image.REPOSITORY}:{__version__}"}
    done = succeeded(real, ns, name)
    assert done["status"].get("restarts", 0) == 0 and not done["status"].get("incidents")
    assert all(p["metadata"]["labels"][names.RESTART_LABEL] == "0"
               for p in job_pods(real.cluster, ns, name))
    assert {r["fingerprint"] for r in results(name).values()} == \
        {reference["results"][0]["fingerprint"]}
    # the workers heard k and skipped steps; the last checkpoint's step was still voted on
    # (a checkpoint step off the multiples of k is sent: test_sdk.py)
    trainer_log = logs(real, ns, job_pods(real.cluster, ns, name)[0]["metadata"]["name"])
    assert re.search(r"reporting every (4|8|16) steps, as the operator asks", trainer_log), \
        trainer_log[-2000:]
    reported = int(re.findall(r"FINAL step=\d+ fingerprint=\S+ reported=(\d+)",
                              trainer_log)[-1])
    assert STEPS // 10 <= reported < STEPS, trainer_log[-2000:]
    assert done["status"]["checkpoint"]["latestVerified"]["step"] == STEPS


def _progress(real: Real, namespace: str, name: str) -> dict[str, Any]:
    progress: dict[str, Any] = (get_job(real.cluster, namespace, name).get("status") or {}
                                ).get("progress") or {}
    return progress


def _latest_step(real: Real, namespace: str, name: str) -> int | None:
    latest = ((get_job(real.cluster, namespace, name).get("status") or {})
              .get("checkpoint") or {}).get("latest") or {}
    return latest.get("step")


SCRAPE = Path(__file__).resolve().parents[2] / "charts" / "goodput-operator" / "scrape" / \
    "serving-pods.yaml"


@pytest.fixture
def serving_metrics(real: Real, ns: str, tmp_path: Path) -> Iterator[Prometheus]:
    """A real Prometheus where the in-cluster operator's --prometheus-url says, scraping the
    serving pods with the chart's documented scrape job: discovered from the operator
    (/sd/serving through the chart's metrics Service), scraped at their pod IPs."""
    [job, _] = yaml.safe_load(SCRAPE.read_text())
    operator = real.operator
    sd = f"http://{operator.service_ip('metrics')}:{operator.values_port('health', 8080)}"
    # Prometheus reads /sd/serving with the token of the ServiceAccount the chart grants it
    # to (serviceDiscovery.readers), as a pod's mounted token would be
    real.cluster.kubectl("create", "serviceaccount", SD_READER, "-n", operator.namespace,
                         check=False)
    token = tmp_path / "sd-token"
    token.write_text(real.cluster.kubectl("create", "token", SD_READER, "-n",
                                          operator.namespace, "--duration=2h").stdout.strip())
    job["http_sd_configs"][0] |= {"url": f"{sd}/sd/serving", "refresh_interval": "1s"}
    job["http_sd_configs"][0]["authorization"]["credentials_file"] = str(token)
    address = urllib.parse.urlsplit(real.prometheus_url)
    server = Prometheus(tmp_path, [job], str(address.hostname), address.port)
    server.start()
    yield server
    server.stop()


def toy_endpoint(real: Real, name: str) -> dict[str, Any]:
    """Replicas of the toy model server (examples/server/serve.py, in the worker image):
    2 requests at once of 1 s each, so a replica serves 2 requests/s."""
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "InferenceEndpoint",
            "metadata": {"name": name},
            "spec": {"ultraServerGroup": real.group, "model": {"name": "toy"},
                     "replicaShape": {"workers": 1, "acceleratorsPerWorker": 16},
                     "scaling": {"minReplicas": 1, "maxReplicas": 3, "intervalSeconds": 2,
                                 "metrics": [{"type": "RequestRate", "target": 2},
                                             {"type": "QueueDepth", "target": 4}],
                                 "scaleDown": {"stabilizationSeconds": 60}},
                     "template": {
                         "metadata": {"annotations": {"prometheus.io/scrape": "true",
                                                      "prometheus.io/port": "8000"}},
                         "spec": {"containers": [{
                             "name": "server", "image": images.WORKER_IMAGE,
                             "imagePullPolicy": "Never",
                             "command": ["python3", "/opt/goodput/server/serve.py", "--slots",
                                         "2", "--tokens-per-second", "32"],
                             "readinessProbe": {"httpGet": {"path": "/health", "port": 8000},
                                                "periodSeconds": 1}}]}}}}


class Load:
    """An open-loop load generator: RATE requests a second at the endpoint's Service (kube-
    proxy spreads them over the leaders), each of 32 tokens; counts the answers."""

    def __init__(self, url: str, rate: float) -> None:
        self.url, self.rate = url, rate
        self.answers: list[str] = []
        self.failures: list[str] = []
        self.sent = 0
        self.stopped = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=64)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _one(self, index: int) -> None:
        body = json.dumps({"prompt": f"request {index % 4}", "max_tokens": 32}).encode()
        request = urllib.request.Request(self.url, body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                self.answers.append(json.loads(response.read())["choices"][0]["text"])
        except (OSError, ValueError) as err:
            self.failures.append(str(err))

    def _run(self) -> None:
        start, index = time.monotonic(), 0
        while not self.stopped.is_set():
            self.pool.submit(self._one, index)
            index += 1
            self.sent = index
            self.stopped.wait(max(0.0, start + index / self.rate - time.monotonic()))

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()
        self.pool.shutdown(wait=True)


def _answer(url: str) -> str | None:
    body = json.dumps({"prompt": "hello", "max_tokens": 1}).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body), timeout=10) as answer:
            return str(json.loads(answer.read())["choices"][0]["text"])
    except OSError:
        return None


def _endpoint(real: Real, namespace: str, name: str) -> dict[str, Any]:
    return dict(json.loads(real.cluster.kubectl("get", "ie", name, "-n", namespace, "-o",
                                                "json").stdout).get("status") or {})


def test_real_servers_scale_out_on_their_own_metrics_and_back_in_after_the_window(
        real: Real, ns: str, serving_metrics: Prometheus) -> None:
    """Load rises: the endpoint scales out on what Prometheus scraped from the real server
    processes (their vLLM-named counters and queue); load stops: back in after the window."""
    apply(real.cluster, toy_endpoint(real, "toy"), ns)
    try:
        wait_for(lambda: _endpoint(real, ns, "toy").get("readyReplicas") == 1, timeout=120,
                 what="one real server ready")
        service = json.loads(real.cluster.kubectl("get", "svc", "toy", "-n", ns, "-o",
                                                  "json").stdout)["spec"]["clusterIP"]
        # a serving replica has a history: its counter scraped for most of the rate's
        # window, as in production (the new replicas' counters are the young ones)
        history = f'max(count_over_time(vllm:request_success_total{{namespace="{ns}"}}[1m]))'
        wait_for(lambda: (promql.instant(serving_metrics.url, history) or 0) >= 50,
                 timeout=120, interval=2, what="the first server scraped for a minute")
        url = f"http://{service}:8000/v1/completions"
        # kube-proxy routes the Service a moment after the pod is Ready: its first answer
        wait_for(lambda: _answer(url), timeout=30, what="the Service answering")
        load = Load(url, rate=5)                   # 2.5 replicas' worth
        try:
            status = wait_for(lambda: (s := _endpoint(real, ns, "toy")).get(
                "readyReplicas") == 3 and s, timeout=180, what="3 real servers ready")
            scraped = (f'vllm:request_success_total{{namespace="{ns}",endpoint="toy"}}')
            wait_for(lambda: (promql.instant(serving_metrics.url, f"count({scraped})") or 0)
                     == 3, timeout=60, what="all three servers scraped")
            # the new servers take their share of the load (kube-proxy spreads it)
            wait_for(lambda: (promql.instant(serving_metrics.url,
                                             f"count({scraped} > 0)") or 0) == 3,
                     timeout=60, what="every server's own counter counting")
            time.sleep(20)          # under the load, nothing scales down (checked below)
        finally:
            load.stop()
        stopped = time.time()
        up = [d for d in status["recentScaling"] if d["to"] > d["from"]]
        assert up and up[-1]["to"] == 3, status["recentScaling"]
        assert set(up[0]["metrics"]) == {"RequestRate", "QueueDepth"}
        pods = json.loads(real.cluster.kubectl("get", "pods", "-n", ns, "-l",
                                               f"{names.ENDPOINT_LABEL}=toy", "-o",
                                               "json").stdout)["items"]
        real_nodes = {n["metadata"]["name"] for n in json.loads(real.cluster.kubectl(
            "get", "nodes", "-l", f"{realnode.REAL_LABEL}=true", "-o", "json").stdout)["items"]}
        assert {p["spec"]["nodeName"] for p in pods} <= real_nodes      # real kubelets
        assert not load.failures, load.failures[:3]        # every request answered
        assert len(load.answers) == load.sent >= 20
        assert len(set(load.answers)) == 4          # deterministic: one text per prompt
        assert _answer(url) == _answer(url)

        status = wait_for(lambda: (s := _endpoint(real, ns, "toy")).get(
            "desiredReplicas") == 1 and s, timeout=300, what="back to 1 after the window")
        def at(decision: dict[str, Any]) -> float:
            return datetime.fromisoformat(decision["time"].replace("Z", "+00:00")).timestamp()
        downs = [d for d in status["recentScaling"] if d["to"] < d["from"]]
        assert downs and all(at(d) > stopped - 1 for d in downs), (stopped, downs)
        last_up = max(at(d) for d in status["recentScaling"] if d["to"] > d["from"])
        assert all(at(d) >= last_up + 60 - 3 for d in downs), (last_up, downs)  # the window
        wait_for(lambda: _endpoint(real, ns, "toy").get("replicas") == 1, timeout=60,
                 what="the extra servers removed")
    finally:
        real.cluster.kubectl("delete", "ie", "--all", "-n", ns, "--wait=true",
                             "--timeout=60s")
        wait_for(lambda: not json.loads(real.cluster.kubectl(
            "get", "pods", "-n", ns, "-o", "json").stdout)["items"], timeout=60,
            what="the servers gone")


def test_the_in_cluster_operator_was_refused_nothing(real: Real) -> None:
    """Runs last in this module: the API server's audit log holds every request the chart's
    ServiceAccount made from the two pods, and RBAC refused none of them."""
    account = (f"system:serviceaccount:{real.operator.namespace}:"
               f"{helm.account_name(real.operator.release)}")
    used, refused = helm.audited(real.box.audit_log, account)
    assert used, f"no request by {account} in the audit log"
    assert not refused, "the chart's RBAC refused the in-cluster operator:\n" + \
        "\n".join(refused)
    assert ("coordination.k8s.io", "leases", "update", real.operator.namespace) in used
    assert ("", "pods", "patch", real.operator.namespace) in used, "the leader label"
