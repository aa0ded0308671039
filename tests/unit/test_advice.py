"""Checkpoint advice (health.advice, decide.advising): Daly's interval for the job's
measured save cost and its group's failure rate, in its status, its step answers and the
SDK."""

from __future__ import annotations

import math
from typing import Any

import pytest

from goodput_operator.decide.job import decide_job
from goodput_operator.health import advice
from goodput_operator.operator.reports import step_answer
from goodput_operator.sdk import Reporter
from goodput_operator.times import millis
from tests.unit.test_decide_job import RUNNING_2, running_pods
from tests.unit.test_sdk import Handler, serving
from tests.unit.world import GROUP, NOW, group_object, group_spec, job, nodes, quarantined, world

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
DAY = 86_400.0


@pytest.mark.parametrize(("save", "mtbf"), [(1.0, 3_600.0), (10.0, 86_400.0), (60.0, 600.0)])
def test_the_interval_is_daly_s_optimum_with_young_s_as_its_leading_term(
        save: float, mtbf: float) -> None:
    found = advice.daly(save, mtbf)
    young = math.sqrt(2 * save * mtbf)
    assert young - save < found < young * 1.3  # higher order, minus the save itself

    def wall(interval: float) -> float:  # Daly's wall time per unit of work (exponential
        return (math.exp((interval + save) / mtbf) - 1) / interval  # failures), up to a factor
    assert wall(found) <= min(wall(found * 0.9), wall(found * 1.1))


def test_a_save_longer_than_two_mtbfs_is_advised_the_mtbf() -> None:
    assert advice.daly(100.0, 40.0) == 40.0


def test_the_window_of_a_decayed_score_grows_with_the_group_s_age_to_h_over_ln2() -> None:
    assert advice.window(14, 14 * DAY) == pytest.approx(14 * DAY / math.log(2) / 2)
    assert advice.window(14, 10_000 * DAY) == pytest.approx(14 * DAY / math.log(2))


def test_the_failure_rate_is_the_scores_over_the_window_and_the_nodes() -> None:
    history = [{"saveSeconds": 2.0, "time": millis(NOW - 600)},
               {"saveSeconds": 4.0, "time": millis(NOW - 300)},
               {"saveSeconds": 3.0, "time": millis(NOW)}]
    found = advice.advise(10.0, 100, 4, 14, 10_000 * DAY, history)
    assert found is not None
    span = 14 * DAY / math.log(2)
    assert found.node_failures_per_day == pytest.approx(10 / 100 / span * DAY)
    assert found.mtbf_seconds == pytest.approx(span * 100 / 10 / 4)
    assert found.save_seconds == 3.0 and found.measured_seconds == 300.0
    assert found.interval_seconds == pytest.approx(advice.daly(3.0, found.mtbf_seconds))
    assert found.far_off  # 300 s against about 3,000 s advised


@pytest.mark.parametrize(("scores", "age", "saves"), [
    (0.0, 30 * DAY, [1.0]),  # no failure seen
    (5.0, 600.0, [1.0]),  # a group too young to say
    (5.0, 30 * DAY, []),  # no save timed
])
def test_no_advice_without_something_to_rest_it_on(scores: float, age: float,
                                                   saves: list[float]) -> None:
    history = [{"saveSeconds": s} for s in saves]
    assert advice.advise(scores, 8, 2, 14, age, history) is None


def advised_job(owner: Obj | None = None, hold_for: str = "") -> tuple[Any, Obj]:
    """A job on us0-n0, us0-n1 with three timed saves 20 s apart (OWNER: that job as a
    pass before left it), in a group 30 days old whose us1-n3 failed a day ago (HOLD_FOR:
    or was held for a probe a tenant's reports asked for)."""
    history = [{"step": 10 * i, "path": f"/ckpt/{i}", "time": millis(NOW - 60 + 20 * i),
                "saveSeconds": 2.0, "verified": True} for i in range(3)]
    owner = owner or job(status={**RUNNING_2, "checkpoint": {"history": history}})
    bodies = nodes()
    bodies["us1-n3"] = quarantined(bodies["us1-n3"], "NodeNotReady", NOW - DAY,
                                   owner=hold_for)
    spec = group_spec()
    group = group_object(spec)
    group["metadata"]["creationTimestamp"] = millis(NOW - 30 * DAY)
    snapshot = world(bodies, [owner], running_pods(owner, "Running", "Running"),
                     group_objects={GROUP: group})
    return decide_job(snapshot, owner), owner


def test_a_job_is_advised_in_its_status_and_told_when_its_interval_is_far_off() -> None:
    decision, _ = advised_job()
    found = decision.desired["checkpointAdvice"]
    lemon = 0.5 ** (1 / 14)  # one failure a day ago, halving every 14 days
    per_node = lemon / (8 * advice.window(14, 30 * DAY))
    mtbf = 1 / (per_node * 2)
    assert found == {"intervalSeconds": float(f"{advice.daly(2.0, mtbf):.2g}"),
                     "saveSeconds": 2.0, "mtbfSeconds": float(f"{mtbf:.2g}"),
                     "nodeFailuresPerDay": float(f"{per_node * DAY:.2g}"),
                     "measuredSeconds": 20.0}
    [condition] = [c for c in decision.desired["conditions"]
                   if c["type"] == "CheckpointInterval"]
    assert (condition["status"], condition["reason"]) == ("False", "FarFromAdvice")
    assert "the job's own: 20s" in condition["message"]
    [event] = [e for e in decision.events if e.reason == "CheckpointIntervalFarOff"]
    assert event.type == "Warning" and event.message == condition["message"]
    _, owner = advised_job()
    owner["status"]["conditions"] = decision.desired["conditions"]  # the pass after
    assert not [e for e in advised_job(owner)[0].events
                if e.reason == "CheckpointIntervalFarOff"]


def test_the_advice_reaches_the_trainer_with_the_answers_to_its_reports() -> None:
    decision, owner = advised_job()
    advised = {**owner, "status": {**owner["status"], **decision.desired}}
    interval = decision.desired["checkpointAdvice"]["intervalSeconds"]
    answer = step_answer({"accepted": True}, advised, 4)
    assert answer["checkpointIntervalSeconds"] == interval

    class Advising(Handler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.answer(200, answer)

    with serving(Advising) as url:
        reporter = Reporter(url=url, token="t")
        assert reporter.checkpoint_interval is None
        reporter.report_step(1)
        assert reporter.checkpoint_interval == interval


def test_a_tenant_s_reports_cannot_move_another_team_s_advice() -> None:
    """A node held for a probe a tenant's votes asked for is no failure of the node's
    (TENANCY.md: evidence asks, never decides): it adds nothing to the group's rate."""
    decision, _ = advised_job(hold_for="team-a/noisy")
    assert "checkpointAdvice" not in decision.desired
    assert not [c for c in decision.desired["conditions"] if c["type"] == "CheckpointInterval"]


def test_a_finished_job_keeps_its_last_advice_and_costs_no_status_write_for_it() -> None:
    decision, owner = advised_job()
    done = {**owner, "status": {**owner["status"], "phase": "Succeeded",
                                "checkpointAdvice": decision.desired["checkpointAdvice"]}}
    assert "checkpointAdvice" not in advised_job(done)[0].desired
