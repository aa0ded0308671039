"""A job's pods are built only once its gang is placed, and only as many as the pass's
write budget lets it create, the smallest requests first (decide.creates)."""

from __future__ import annotations

import pytest

from goodput_operator.api.trainingjob import MAX_WORKERS
from goodput_operator.decide import decide, decide_jobs, trial
from goodput_operator.decide.creates import WriteBudget
from goodput_operator.decide.priority import PRIORITY_CLASS, Classes, PriorityClass
from tests.unit.world import job, nodes, placed, worker, world

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("left", "asked", "granted", "after"), [
    (10, 4, 4, (6, 0)),
    (3, 4, 3, (0, 1)),    # part of it: the rest is deferred to the next pass
    (0, 4, 0, (0, 4)),
    (5, 0, 0, (5, 0)),
])
def test_a_budget_grants_what_is_left(left: int, asked: int, granted: int,
                                      after: tuple[int, int]) -> None:
    budget = WriteBudget(left)
    assert budget.take(asked) == granted
    assert (budget.left, budget.deferred) == after


def test_a_dozen_capped_gangs_that_fit_nowhere_build_no_pods_and_block_no_one() -> None:
    attackers = [job(f"a{i}", workers=MAX_WORKERS) for i in range(12)]
    snapshot = world(nodes(2), [*attackers, job("b", workers=2)])
    plan = decide(snapshot)
    assert [len(d.attempt.create) for d in plan.jobs if d.attempt] == [0] * 12 + [2]
    assert all(d.attempt.missing is not None and len(d.attempt.missing) == MAX_WORKERS
               for d in plan.jobs[:12] if d.attempt)
    assert [d.desired["phase"] for d in plan.jobs] == ["Pending"] * 12 + ["Placing"]


def test_the_one_pod_replacing_a_rank_goes_before_a_big_gangs_chunk() -> None:
    big = job("big", workers=8)  # first in the pass's order, placed now, 8 pods missing
    small = job("small", status={"phase": "Running", "placement": placed(
        "us2-n0", "us2-n1", domain="us-2")})
    pods = [worker(small, 0, node_name="us2-n0", phase="Running", ready=True)]
    snapshot = world(nodes(3), [big, small], pods)
    budget = WriteBudget(4)
    with trial(snapshot):
        decided = {d.key[1]: d for d in decide_jobs(snapshot, [], budget)}
    assert [p["metadata"]["name"] for p in decided["small"].attempt.create] == ["small-r0-w1"]
    assert len(decided["big"].attempt.create) == 3
    assert "3 of 8 missing this pass" in decided["big"].desired["message"]
    assert (budget.left, budget.deferred) == (0, 5)


def test_the_pods_are_built_with_the_jobs_priority_class() -> None:
    classes = Classes(pod={"urgent": PriorityClass("urgent", 1000, PRIORITY_CLASS)})
    snapshot = world(None, [job(workers=2, priorityClassName="urgent")], classes=classes)
    [decision] = decide(snapshot).jobs
    assert [p["spec"]["priorityClassName"] for p in decision.attempt.create] == ["urgent"] * 2


def test_a_job_whose_pods_cannot_be_built_is_handed_back_and_the_others_go_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from goodput_operator.decide import creates
    real = creates.build.worker_pod

    def worker_pod(job: dict[str, object], *args: object, **kwargs: object) -> object:
        if job["metadata"]["name"] == "bad":  # type: ignore[index]
            raise ValueError("bad data of one job")
        return real(job, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(creates.build, "worker_pod", worker_pod)
    snapshot = world(None, [job("bad", workers=2), job("good", workers=2)])
    failures: list[object] = []
    budget = WriteBudget(10)
    with trial(snapshot):
        decided = decide_jobs(snapshot, failures, budget)  # type: ignore[arg-type]
    assert [d.key[1] for d in decided] == ["good"] and len(decided[0].attempt.create) == 2
    assert [str(f.error) for f in failures] == ["bad data of one job"]  # type: ignore[attr-defined]
    assert (budget.left, budget.deferred) == (8, 0)
