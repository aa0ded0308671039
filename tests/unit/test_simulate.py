"""The goodput simulator: exact books for what it is given, and the operator's own
decisions (the same function as the controller, on the same snapshot)."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from goodput_operator import cli
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.decide.job import decide_job
from goodput_operator.simulate import failures
from goodput_operator.simulate.engine import Job, Simulation
from goodput_operator.simulate.failures import FailureModel
from goodput_operator.simulate.plan import describe, expected_down, plan
from goodput_operator.simulate.policies import Costs, policies, young_daly
from goodput_operator.simulate.scenario import Scenario, load_fleet, read_job, run
from goodput_operator.topology.placement import RankSlot
from goodput_operator.topology.record import nodes_of, ranks_of
from tests.unit.test_decide_job import RUNNING_2, running_pods
from tests.unit.world import NOW, group_spec, job, nodes, placed, quarantined, world

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
QUIET = FailureModel(scale=0.0)


def test_with_failures_switched_off_every_policy_keeps_every_second() -> None:
    scenario = Scenario(load_fleet("trn2"), days=3, model=QUIET,
                        costs=Costs(pod_start_seconds=0, load_seconds=0))
    for name, outcome in run(scenario).items():
        result = outcome.result
        assert (result.goodput, result.job_goodput, result.incidents) == (1.0, 1.0, 0), name
        assert sum(result.lost.values()) == 0, name


def test_with_failures_switched_off_the_launch_is_the_only_badput() -> None:
    scenario = Scenario(load_fleet("trn2"), days=1, model=QUIET)
    result = run(scenario, ("ours",))["ours"].result
    launch = scenario.costs.restart_seconds
    assert result.lost == pytest.approx({"launch": launch * 256}, abs=1e-6)
    assert result.useful == pytest.approx((scenario.horizon - launch) * 256, abs=1e-3)


SCRIPTED = Costs(interval=1000.0, save_seconds=10.0, lease_renew_seconds=0.0)


def _scripted(tmp_path: Path, policy: str, kind: str = "accelerator",
              at: float = 5000.0) -> tuple[Scenario, Any]:
    fleet = load_fleet("trn2", spares_per_domain=1)  # 12 workers, a spare per UltraServer
    victim = fleet.nodes[0]["metadata"]["name"]  # slot 0 of the first: a rank's node
    trace = tmp_path / "trace.jsonl"
    trace.write_text(json.dumps({"time": at, "node": victim, "kind": kind}) + "\n")
    scenario = Scenario(fleet, days=1, costs=SCRIPTED, trace=trace)
    return scenario, run(scenario, (policy,))[policy].result


def _stalls(start: float, end: float) -> float:
    """Save stalls of a stretch from START to END at SCRIPTED's cadence."""
    return (end - start) // 1010.0 * 10.0


@pytest.mark.parametrize(("policy", "detection", "replacement"), [
    ("ours", 20.0 + 0.35, 0.06),  # Lease silent leaseSilenceSeconds, then a pass
    ("kubernetes", 350.0, 0.0),  # 50 s grace + 300 s toleration; the scheduler at once
    ("hyperpod", 60.0, 60.0),  # health agent, then the node swap
    # Kueue's hot swap once the pods terminated (the toleration's 300 s), or 30 s after the
    # lifecycle controller's NotReady with that gate off; the failed node's UltraServer has
    # no free node (Kueue knows no spares: the gang took them), so the workload is evicted
    # and requeued after backoffBaseSeconds
    ("kueue", 350.0, 60.0),
    ("kueue-30s", 80.0, 60.0),
])
def test_one_scripted_node_failure_costs_exactly_its_scripted_durations(
        tmp_path: Path, policy: str, detection: float, replacement: float) -> None:
    scenario, result = _scripted(tmp_path, policy)
    accelerators, restart = 12 * 16, SCRIPTED.restart_seconds
    start = restart  # training starts after the launch
    saved = start + (5000.0 - start) // 1010.0 * 1010.0  # the newest checkpoint
    again = 5000.0 + detection + replacement + restart
    expected = {"launch": restart, "detection": detection, "replacement": replacement,
                "restart": restart, "lostWork": 5000.0 - saved,
                "checkpoint": _stalls(start, saved) + _stalls(again, scenario.horizon)}
    found = {k: v / accelerators for k, v in result.lost.items()}
    assert found == pytest.approx(expected, abs=1e-3)
    assert result.incidents == 1 and result.uncounted == 0
    assert result.useful / accelerators == pytest.approx(
        scenario.horizon - sum(expected.values()), abs=1e-3)
    assert result.by_cause == pytest.approx(
        {"NodeFailure": (detection + replacement + restart + 5000.0 - saved) * accelerators},
        abs=1e-2)


def test_corruption_rolls_back_to_the_checkpoint_before_it_and_ours_finds_it_sooner(
        tmp_path: Path) -> None:
    lost = {}
    for policy in ("ours", "kubernetes"):
        _, result = _scripted(tmp_path, policy, kind="sdc", at=5000.0)
        by_phase = {k: v / 192 for k, v in result.lost.items()}
        # from the newest checkpoint before the corruption to the verdict, all redone
        lost[policy] = by_phase["detection"] + by_phase["lostWork"]
    start = SCRIPTED.restart_seconds
    before = 5000.0 - (start + (5000.0 - start) // 1010.0 * 1010.0)
    assert lost["ours"] == pytest.approx(before + SCRIPTED.sdc_vote_seconds, abs=1e-3)
    assert lost["kubernetes"] == pytest.approx(before + SCRIPTED.human_seconds, abs=1e-3)


def test_a_crash_restarts_in_place_and_a_hang_waits_out_its_window(tmp_path: Path) -> None:
    _, crash = _scripted(tmp_path, "ours", kind="crash")
    assert crash.lost["replacement"] / 192 == pytest.approx(
        10.0, abs=1e-3)  # the application error's backoff (failurePolicy.backoff, 10 s)
    assert crash.lost["detection"] / 192 == pytest.approx(SCRIPTED.pass_seconds, abs=1e-3)
    _, hang = _scripted(tmp_path, "ours", kind="hang")
    assert hang.lost["detection"] / 192 == pytest.approx(600.0, abs=1e-3)  # minSeconds
    assert set(crash.by_cause) == {"ApplicationError"} and set(hang.by_cause) == {"Hang"}


# ---- the simulator and the controller decide alike ---------------------------------------

def _snapshot_job(workers: int, ranks: list[str], **spec: Any) -> Obj:
    status = {**RUNNING_2, "placement": placed(*ranks)}
    return job(status=status, workers=workers, **spec)


SPARE = group_spec(spares={"perDomain": 1})
FOUR = nodes(4)
# Snapshots of the e2e scenarios (tests/e2e/test_recovery.py) and of the decision tests'
# world: the group, its nodes (the failed ones quarantined), the running job
SAME = [
    ("a rank's node fails: its UltraServer's spare takes the rank (e2e: recovery)", SPARE,
     {**FOUR, "us0-n1": quarantined(FOUR["us0-n1"], "NodeNotReady", NOW - 20)},
     _snapshot_job(3, ["us0-n0", "us0-n1", "us0-n2"])),
    ("two nodes of one UltraServer fail together: the gang moves whole (e2e: recovery)", SPARE,
     {**FOUR, "us0-n0": quarantined(FOUR["us0-n0"], "NodeNotReady", NOW - 20),
      "us0-n1": quarantined(FOUR["us0-n1"], "NodeNotReady", NOW - 20)},
     _snapshot_job(3, ["us0-n0", "us0-n1", "us0-n2"])),
    ("no spare: a free node of the same UltraServer", group_spec(),
     {**FOUR, "us0-n0": quarantined(FOUR["us0-n0"], "NodeNotReady", NOW - 20)},
     _snapshot_job(2, ["us0-n0", "us0-n1"])),
    ("a full UltraServer and a spare-only policy: the gang moves", group_spec(),
     {**FOUR, "us0-n3": quarantined(FOUR["us0-n3"], "NodeNotReady", NOW - 20)},
     _snapshot_job(4, ["us0-n0", "us0-n1", "us0-n2", "us0-n3"],
                   failurePolicy={"nodeReplacement": "spare"})),
    ("nodeReplacement wait: no placement", SPARE,
     {**FOUR, "us0-n0": quarantined(FOUR["us0-n0"], "NodeNotReady", NOW - 20)},
     _snapshot_job(2, ["us0-n0", "us0-n1"], failurePolicy={"nodeReplacement": "wait"})),
    ("an elastic gang with no room left shrinks", group_spec(),
     {**nodes(1), "us0-n0": quarantined(nodes(1)["us0-n0"], "NodeNotReady", NOW - 20)},
     _snapshot_job(4, ["us0-n0", "us0-n1", "us0-n2", "us0-n3"],
                   elastic={"minWorkers": 2, "step": 1})),
]


@pytest.mark.parametrize(("title", "spec", "bodies", "job_obj"), SAME,
                         ids=[s[0] for s in SAME])
def test_the_simulator_and_the_controller_replace_the_same_ranks(
        title: str, spec: Any, bodies: dict[str, Obj], job_obj: Obj) -> None:
    workers = len(ranks_of(job_obj["status"]["placement"]))
    snapshot = world(bodies, jobs=[job_obj], spec=spec,
                     pods=running_pods(job_obj, *["Running"] * workers))
    decided = decide_job(snapshot, job_obj)

    parsed = TrainingJobSpec.model_validate(job_obj["spec"])
    simulated = Job("j", parsed, float("inf"), namespace="ns")
    simulation = Simulation(policies(Costs())["ours"], Costs(), spec, list(bodies.values()),
                            [], [], FailureModel(), 3600.0)
    fleet = simulation.fleet
    simulation.hold(simulated, [RankSlot(r["rank"], r["node"], r["domain"],
                                         fleet.nodes[r["node"]].slot)
                                for r in ranks_of(job_obj["status"]["placement"])])
    failed = sorted(n for n in nodes_of(job_obj["status"]["placement"])
                    if fleet.nodes[n].state == "quarantined")
    replaced = simulation.operator_replacement(simulated, failed)

    assert [r.node for r in replaced.ranks] == nodes_of(decided.placement), title
    assert replaced.action == decided.desired["incidents"][-1]["action"], title


# ---- the model and the planner ---------------------------------------------------------

def test_the_simulator_imports_neither_kopf_nor_the_kubernetes_client() -> None:
    probe = ("import sys, goodput_operator.simulate.plan, goodput_operator.simulate.command\n"
             "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in "
             "('kopf', 'kubernetes', 'aiohttp'))))")
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert found == ""


def test_llama3_rates_give_its_419_interruptions_on_its_fleet() -> None:
    model = FailureModel()
    assert model.per_day(16_384, 2_048) * 54 == pytest.approx(419)
    drawn = failures.draw(model, [f"n{i}" for i in range(2_048)], 8, 54 * 86_400.0, seed=3)
    assert 419 - 3 * 20.5 < len(drawn) < 419 + 3 * 20.5  # Poisson: 3 standard deviations


def test_a_trace_names_the_line_it_cannot_use(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"time": 5, "node": "a", "kind": "host"}\n{"time": 9, "node": "zz", '
                     '"kind": "host"}\n')
    with pytest.raises(ValueError, match=r"t.jsonl:2: node 'zz' is not in the fleet"):
        failures.read_trace(trace, ["a"], FailureModel())
    trace.write_text('{"time": 5, "node": "a", "kind": "gremlins"}\n')
    with pytest.raises(ValueError, match=r"t.jsonl:1: unknown failure cause 'gremlins'"):
        failures.read_trace(trace, ["a"], FailureModel())


def test_young_daly_is_the_square_root_of_twice_save_times_mtbf() -> None:
    assert young_daly(10.0, 5000.0) == pytest.approx(316.2277, abs=1e-3)
    assert young_daly(10.0, float("inf")) == float("inf")


def test_the_plan_recommends_enough_spares_for_the_nodes_down_and_prints_it() -> None:
    scenario = Scenario(load_fleet("synthetic:trn2:16"), days=20,
                        model=FailureModel(scale=20.0), seed=4)
    result = plan(scenario)
    down = expected_down(scenario)
    assert down > 1
    best = next(c for d, g, c in result.spares if (d, g) == result.best_spares)
    fewest = min((g, c) for d, g, c in result.spares if d == 0)
    per_domain, per_group = result.best_spares
    assert fewest[0] == math.ceil(down / 2) and per_domain * 16 + per_group > fewest[0]
    assert best.goodput > fewest[1].goodput  # too few: node failures wait for repairs
    assert result.best_interval > 0 and result.young_daly > 0
    # three intervals around Young/Daly's, then two halfway to the best one's neighbours
    tried = [interval for interval, _ in result.intervals]
    grid = [result.young_daly * f for f in (0.5, 1.0, 2.0)]
    best_of_grid = max((c.goodput, i) for i, c in result.intervals if i in grid)[1]
    assert tried == pytest.approx(sorted([*grid, best_of_grid / 2 ** 0.5,
                                          best_of_grid * 2 ** 0.5]))
    assert result.best_interval == max(result.intervals, key=lambda i: i[1].goodput)[0]
    text = "\n".join(describe(result))
    assert "Recommendation: hold" in text and "Young/Daly" in text
    assert all(name in text for name in ("ours", "kubernetes", "kueue", "hyperpod"))


def test_a_scenario_uses_the_failures_it_is_given_for_every_policy() -> None:
    crashes = FailureModel(causes=(failures.Cause("crash", "crash", "accelerator", 0.05),))
    scenario = Scenario(load_fleet("trn2", spares_per_domain=1), days=2, model=crashes,
                        seed=2)
    drawn = scenario.failures()
    assert drawn == scenario.failures()  # the seed decides them
    runs = run(scenario, failures=drawn)
    assert {r.result.incidents > 0 for r in runs.values()} == {True}
    assert dataclasses.replace(scenario, seed=3).failures() != drawn


# ---- goodput plan -----------------------------------------------------------------------

@pytest.mark.parametrize(("args", "message"), [
    (["--jobs", "4,x"], "bad --jobs '4,x'"),
    (["--jobs", "0"], "--jobs: every job needs at least one worker"),
    (["--cost", "warp-seconds=3"], "unknown --cost 'warp-seconds'"),
    (["--cost", "save-seconds=fast"], "bad --cost 'save-seconds=fast'"),
    (["--failure", "rate.gremlins=1"], "unknown failure cause 'gremlins'"),
    (["--failure", "speed.host=1"], "bad failure override 'speed.host'"),
    (["--policies", "ours,slurm"], "unknown policies ['slurm']"),
    (["--fleet", "atlantis"], "unknown fleet 'atlantis'"),
    (["--days", "0"], "--days must be positive"),
])
def test_plan_refuses_bad_input_in_one_line(args: list[str], message: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", "--fleet", "trn2", *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_plan_prints_its_recommendation_as_json(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    chart = tmp_path / "spares.svg"
    assert cli.main(["plan", "--fleet", "trn2", "--days", "2", "--rate-scale", "30",
                     "--workers", "1", "--json", "--svg", str(chart)]) == 0
    found = json.loads(capsys.readouterr().out)
    assert set(found["policies"]) == {"ours", "kubernetes", "kueue", "hyperpod"}
    assert found["checkpointIntervalSeconds"] > 0 and found["youngDalySeconds"] > 0
    assert found["spares"] in [{"perDomain": s["perDomain"], "perGroup": s["perGroup"]}
                               for s in found["sparesTried"]]
    assert chart.read_text().startswith("<svg")


def test_a_job_file_gives_the_spec_and_its_size(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    document = job(workers=3, acceleratorsPerWorker=16,
                   failurePolicy={"hang": {"minSeconds": 60}})
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps(document))  # JSON is YAML
    scenario = Scenario(load_fleet("trn2"), job_document=read_job(path))
    (only,) = scenario.make_jobs()
    assert only.spec.workers == 3 and only.spec.failure_policy.hang.min_seconds == 60
    path.write_text(json.dumps(job(workers=2, acceleratorsPerWorker=8)))
    assert cli.main(["plan", "--fleet", "trn2", "--job", str(path)]) == 1
    assert "acceleratorsPerWorker 8 is not a whole node (16)" in capsys.readouterr().err


def test_a_node_failing_again_stays_out_until_its_new_repair(tmp_path: Path) -> None:
    """A node repaired, released and failing again is out for its whole new repair: the
    first repair's healthy time is forgotten when it fails (as the operator's cache
    forgets it), so another node's release check cannot free it minutes into its new
    quarantine. Three failures of 2 h each: every one is down for its repair, the
    release wait and a pass."""
    fleet = load_fleet("trn2", spares_per_domain=1)
    victim, other = (fleet.nodes[i]["metadata"]["name"] for i in (0, 5))
    repair, again = 7200.0, 5000.0 + 7200.0 + 1500.0  # after the first release
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in [
        {"time": 5000.0, "node": victim, "kind": "accelerator"},
        {"time": again, "node": victim, "kind": "accelerator"},
        # repaired 300 s into the victim's second quarantine: its release checks run then
        {"time": again + 300.0 - repair, "node": other, "kind": "accelerator"}]))
    scenario = Scenario(fleet, days=1, costs=SCRIPTED, trace=trace,
                        model=FailureModel().with_overrides({"repair.accelerator": 2}))
    result = run(scenario, ("ours",))["ours"].result
    wait = scenario.fleet.group.quarantine.release_after_healthy_seconds \
        + SCRIPTED.pass_seconds
    assert result.down / 16 == pytest.approx(3 * (repair + wait), abs=1e-3)


def test_a_bad_device_on_a_node_computing_nothing_strikes_the_gang_that_computes_on_it(
        tmp_path: Path) -> None:
    """Corruption striking during the launch (no step computed yet) is not dropped: the
    bad device stays bad, and corrupts the gang from the moment it runs."""
    _, result = _scripted(tmp_path, "ours", kind="sdc", at=1.0)
    assert result.incidents == 1 and set(result.by_cause) == {"SilentDataCorruption"}
    start = SCRIPTED.restart_seconds  # training starts after the launch, corrupt at once
    by_phase = {k: v / 192 for k, v in result.lost.items()}
    assert by_phase["detection"] == pytest.approx(SCRIPTED.sdc_vote_seconds, abs=1e-3)
    assert by_phase["launch"] == pytest.approx(start, abs=1e-3)


def _with(tmp_path: Path, policy: str, costs: Costs, at: float = 5000.0) -> Any:
    """One accelerator failure of a rank's node at AT, under COSTS."""
    fleet = load_fleet("trn2", spares_per_domain=1)
    trace = tmp_path / "trace.jsonl"
    trace.write_text(json.dumps({"time": at, "node": fleet.nodes[0]["metadata"]["name"],
                                 "kind": "accelerator"}) + "\n")
    return run(Scenario(fleet, days=1, costs=costs, trace=trace), (policy,))[policy].result


def test_a_noticed_node_failure_is_saved_and_moved_before_it_goes(tmp_path: Path) -> None:
    noticed = _with(tmp_path, "ours", dataclasses.replace(SCRIPTED, notice_fraction=1.0))
    plain = _with(tmp_path, "ours", SCRIPTED)
    lost = {k: v / 192 for k, v in noticed.lost.items()}
    assert set(noticed.by_cause) == {"Notice"} and noticed.incidents == 1
    # the save a pass after the notice is the resume point: no work redone, no detection
    assert lost.get("lostWork", 0) == 0 and lost.get("detection", 0) == 0
    assert lost["replacement"] == pytest.approx(SCRIPTED.replacement_seconds, abs=1e-6)
    assert noticed.useful > plain.useful
    # the baselines do not act on notices: the same failure, the same result
    for policy in ("kubernetes", "hyperpod"):
        assert _with(tmp_path, policy, dataclasses.replace(
            SCRIPTED, notice_fraction=1.0)).useful == _with(tmp_path, policy, SCRIPTED).useful


def test_in_memory_checkpoints_restore_from_a_peer_and_stall_less(tmp_path: Path) -> None:
    memory = dataclasses.replace(SCRIPTED, in_memory=True, memory_save_seconds=1.0,
                                 memory_load_seconds=0.25)
    result = _with(tmp_path, "ours", memory)
    lost = {k: v / 192 for k, v in result.lost.items()}
    assert lost["restart"] == pytest.approx(memory.pod_start_seconds + 0.25, abs=1e-6)
    assert lost["launch"] == pytest.approx(memory.restart_seconds, abs=1e-6)  # nothing to
    # restore at the start: the launch is as before; each snapshot stalls 1 s, not 10
    assert lost["checkpoint"] < _with(tmp_path, "ours", SCRIPTED).lost["checkpoint"] / 192 / 5
    assert result.useful > _with(tmp_path, "ours", SCRIPTED).useful


def test_the_plan_says_what_it_assumed(tmp_path: Path) -> None:
    scenario = Scenario(load_fleet("trn2"), days=0.2, model=QUIET,
                        costs=Costs(in_memory=True, notice_fraction=0.5))
    text = "\n".join(describe(plan(scenario, ("ours",))))
    assert "Assumed: in-memory checkpoints (a 0.1s snapshot" in text
    assert "Assumed: 50% of node failures announced 120s ahead" in text
