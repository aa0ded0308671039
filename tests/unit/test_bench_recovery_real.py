"""The real-node recovery head-to-head (bench/recovery_real.py): the JobSet it runs the
example trainer as, and how it reads when that trainer trains again (the run itself needs
real nodes and JobSet)."""

from __future__ import annotations

from typing import Any

import pytest
from bench import recovery_real as bench

from tests.unit.test_jobset_peer import unknown_to_jobset

pytestmark = pytest.mark.unit


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["replicatedJobs"][0]["template"]["spec"]
    return spec


def test_the_trainingjob_of_the_trials_is_one_the_api_admits() -> None:
    from goodput_operator.api.trainingjob import TrainingJobSpec
    spec = TrainingJobSpec.model_validate(bench.trainer_job()["spec"])
    policy = spec.failure_policy
    assert policy.max_restarts >= 3  # a restart per trial of a quick run
    # the CRD's rule (api/trainingjob.py), which the model alone does not check: the
    # trials' job, with a zero backoff, was refused at 1000 restarts
    assert policy.max_restarts <= 10 or policy.backoff.initial_seconds >= 1


def test_the_jobset_runs_the_trainer_the_trainingjob_runs() -> None:
    ours = bench.trainer_job()["spec"]
    theirs = bench.jobset_trainer("t")
    job = pod_spec(theirs)
    [container] = job["template"]["spec"]["containers"]
    [mine] = ours["template"]["spec"]["containers"]
    assert (job["completions"], job["parallelism"]) == (ours["workers"],) * 2
    assert container["resources"]["limits"] == {
        "aws.amazon.com/neuron": str(ours["acceleratorsPerWorker"])}
    for key in ("image", "command", "args"):
        assert container[key] == mine[key], key
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["WORLD_SIZE"] == str(ours["workers"])
    assert env["MASTER_ADDR"] == "t-workers-0-0.t"  # JobSet's name for pod 0 of job 0
    assert env["GOODPUT_CHECKPOINT_DIR"] == "/shared/checkpoints/t"
    assert job["template"]["spec"]["nodeSelector"]["sandbox.goodput.dev/real-node"] == "true"


def test_tuned_the_whole_gang_is_made_again_at_the_taint() -> None:
    doc = bench.jobset_trainer("t")
    job = pod_spec(doc)
    assert job["backoffLimit"] == 0 and doc["spec"]["failurePolicy"]["maxRestarts"] == \
        bench.trainer_job()["spec"]["failurePolicy"]["maxRestarts"]
    assert {(t["key"], t["tolerationSeconds"]) for t in job["template"]["spec"]["tolerations"]
            } == {("node.kubernetes.io/unreachable", 0), ("node.kubernetes.io/not-ready", 0)}


def test_every_field_of_the_trainers_jobset_is_one_jobsets_crd_knows() -> None:
    assert unknown_to_jobset(bench.jobset_trainer("t")["spec"]) == []


@pytest.mark.parametrize(("log", "first"), [
    ("2026-12-04T12:00:00.000000000Z 12:00:00 rank 0: world 4, master m:29500\n"
     "2026-12-04T12:00:10.500000000Z 12:00:10 rank 0: step 10 loss 0.250000\n"
     "2026-12-04T12:00:15.500000000Z 12:00:15 rank 0: step 20 loss 0.200000\n",
     1796385606.0),  # step 10 at :10.5, paced 0.5 s: step 1 at :06.0
    ("2026-12-04T12:00:00.000000000Z 12:00:00 rank 1: world 4, master m:29500\n"
     "2026-12-04T12:00:10.500000000Z 12:00:10 rank 1: step 10 loss 0.250000\n",
     1796385606.0),  # any rank's log: Kueue's remade rank 1
    ("2026-12-04T12:00:00.000000000Z 12:00:00 rank 0: world 4, master m:29500\n", None),
    ("", None),
])
def test_the_first_step_is_read_from_a_ranks_log(log: str, first: float | None) -> None:
    assert bench.first_step(log) == first


def test_ours_against_the_jobset_by_medians() -> None:
    mine = [{"total": 24.0, "checkpoint_load": 3.0}, {"total": 26.0, "checkpoint_load": 3.0},
            {"total": 25.0, "checkpoint_load": 4.0}]
    jobsets: list[dict[str, Any]] = [
        {"outcome": "recovered", "k8s_taint": 50.0, "running": 55.0, "training": 62.5},
        {"outcome": "timed out"}]
    found = bench.against_peer(mine, jobsets, "JobSet v0.11.1 tuned")
    assert found["ours_median_s"] == {"running": 21.0, "training": 25.0}
    assert found["median_s"] == {"k8s_taint": 50.0, "running": 55.0, "training": 62.5}
    assert found["ours_over_peer"] == {"running": 0.382, "training": 0.4}


def test_a_peer_whose_ranks_ran_again_but_never_trained_has_only_a_running_ratio() -> None:
    kueue: list[dict[str, Any]] = [
        {"k8s_taint": 51.9, "running": 62.71, "outcome": "timed out"},
        {"k8s_taint": 46.74, "running": 57.58, "outcome": "timed out"}]
    found = bench.against_peer([{"total": 26.0, "checkpoint_load": 3.0}], kueue,
                               "Kueue v0.17.0 TAS hot swap")
    assert found["median_s"] == {"k8s_taint": 49.32, "running": 60.14, "training": None}
    assert found["reached"] == {"running": 2, "training": 0}
    assert found["ours_over_peer"] == {"running": 0.382, "training": None}


def test_a_peer_that_never_ran_again_has_no_ratio() -> None:
    found = bench.against_peer([{"total": 24.0, "checkpoint_load": 3.0}],
                               [{"outcome": "timed out"}], "JobSet v0.11.1 tuned")
    assert found["median_s"] == {"k8s_taint": None, "running": None, "training": None}
    assert found["ours_over_peer"] == {"running": None, "training": None}


def test_a_ranks_first_step_is_read_from_the_pod_listed_with_its_uid() -> None:
    from types import SimpleNamespace
    asked: list[tuple[str, ...]] = []

    class Box:
        def kubectl(self, *args: str, check: bool = True) -> SimpleNamespace:
            asked.append(args)
            return SimpleNamespace(returncode=0, stdout=(
                "2026-12-04T12:00:10.500000000Z 12:00:10 rank 0: step 10 loss 0.25\n"))

    pods = [{"metadata": {"uid": "old", "name": "p-old"}},
            {"metadata": {"uid": "new", "name": "p-new"}}]
    assert bench.rank_stepped(Box(), pods, "gone") is None and asked == []
    assert bench.rank_stepped(Box(), pods, "new") == 1796385606.0
    assert asked == [("logs", "-n", bench.NAMESPACE, "p-new", "--timestamps")]


def test_the_kueue_job_runs_the_trainer_the_trainingjob_runs() -> None:
    from goodput_operator.sandbox import peers
    ours = bench.trainer_job()["spec"]
    service, theirs = bench.kueue_trainer("t")
    job = theirs["spec"]
    pod = job["template"]["spec"]
    [container] = pod["containers"]
    [mine] = ours["template"]["spec"]["containers"]
    assert (job["completions"], job["parallelism"]) == (ours["workers"],) * 2
    assert job["completionMode"] == "Indexed" and job["suspend"] is True
    for key in ("image", "command", "args"):
        assert container[key] == mine[key], key
    env = {e["name"]: e.get("value") for e in container["env"]}
    # rank 0's name: the Indexed Job's pod hostname under the headless Service
    assert env["MASTER_ADDR"] == "t-0.t" and pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": "t"}
    assert env["GOODPUT_CHECKPOINT_DIR"] == "/shared/checkpoints/t"
    assert theirs["metadata"]["namespace"] == service["metadata"]["namespace"] == bench.NAMESPACE
    # queued where the trials' ClusterQueue takes it, inside the block ours keeps a rank in
    assert theirs["metadata"]["labels"][peers.QUEUE_LABEL] == bench.KUEUE_QUEUE
    from goodput_operator.api.ultraservergroup import UltraServerGroupSpec
    spec = UltraServerGroupSpec.model_validate(bench.group()["spec"])
    assert job["template"]["metadata"]["annotations"] == {
        peers.REQUIRED: peers.tas_level(spec, "block")}
    assert pod["nodeSelector"] == dict(spec.node_selector)


def test_under_kueue_the_lost_index_is_made_again_at_the_taint() -> None:
    job = bench.kueue_trainer("t")[1]["spec"]
    assert "backoffLimit" not in job  # the Job's default (6): the lost index made again
    assert {(t["key"], t["tolerationSeconds"]) for t in job["template"]["spec"]["tolerations"]
            } == {("node.kubernetes.io/unreachable", 0), ("node.kubernetes.io/not-ready", 0)}
