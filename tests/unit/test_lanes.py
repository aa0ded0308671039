"""`make test`'s runner (tests/lanes.py): every cluster test in exactly one lane, lanes that
share no sandbox, and a summary read from pytest's own reports."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests import lanes

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parents[1]


def lane_modules(lane: lanes.Lane) -> set[Path]:
    """The test modules LANE's pytest collects: its paths, less what it ignores."""
    chosen: set[Path] = set()
    ignored = {lanes.ROOT / arg.removeprefix("--ignore=") for arg in lane.args
               if arg.startswith("--ignore=")}
    for arg in lane.args:
        if arg.startswith("-"):
            continue
        path = lanes.ROOT / arg
        chosen |= {path} if path.is_file() else set(path.glob("test_*.py"))
    return chosen - ignored


def test_every_cluster_test_module_runs_in_exactly_one_lane() -> None:
    cluster_modules = {*TESTS.glob("integration/test_*.py"), *TESTS.glob("e2e/test_*.py"),
                       *TESTS.glob("kind/test_*.py")}
    seen: dict[Path, str] = {}
    for lane in lanes.LANES:
        for module in lane_modules(lane):
            assert module not in seen, f"{module.name} in lanes {seen[module]} and {lane.name}"
            seen[module] = lane.name
    assert set(seen) == cluster_modules, sorted(p.name for p in cluster_modules ^ set(seen))


def test_lanes_share_no_session_sandbox_and_need_only_steps_the_run_has() -> None:
    assert len({lane.sandbox for lane in lanes.LANES}) == len(lanes.LANES)
    from goodput_operator.sandbox.versions import KIND_COMPONENTS
    steps = {"host packages", "images", "kubernetes", "etcd", "kwok", "helm", "coredns",
             "kueue", "kind image", *(c.name for c in KIND_COMPONENTS)}
    assert all(set(lane.needs) <= steps for lane in lanes.LANES)


def test_the_lane_that_runs_the_rbac_audit_reads_what_every_audited_lane_did() -> None:
    """The audit waits for each audited lane's file: those lanes need no step the audit's
    lane lacks (a lane that never starts writes nothing), and write where it reads."""
    rbac = lanes.ROOT / "tests/e2e/test_chart_rbac.py"
    auditor = next(lane for lane in lanes.LANES if rbac in lane_modules(lane))
    others = [lane for lane in lanes.LANES if lane is not auditor]
    audited = [lane for lane in others if lane.audited]
    assert audited and not auditor.audited
    assert all(set(lane.needs) <= set(auditor.needs) for lane in audited)
    read = lanes.lane_env(auditor, others)["GOODPUT_TEST_AUDITED_IN"].split(":")
    written = [lanes.lane_env(lane, [o for o in lanes.LANES if o is not lane])
               ["GOODPUT_TEST_AUDIT_OUT"] for lane in audited]
    assert sorted(read) == sorted(written)
    names = lanes.lane_env(auditor, others)["GOODPUT_TEST_ELSEWHERE"].split()
    assert {Path(module).name for lane in others for module in lane.args} <= set(names)


def test_the_junit_report_gives_counts_and_each_modules_seconds(tmp_path: Path) -> None:
    report = tmp_path / "r.xml"
    report.write_text("""<?xml version="1.0"?><testsuites><testsuite>
      <testcase classname="tests.e2e.test_a" name="test_one" time="10.5"/>
      <testcase classname="tests.e2e.test_a.TestGroup" name="test_two" time="1.5">
        <failure message="boom"/></testcase>
      <testcase classname="tests.e2e.test_b" name="test_three" time="2">
        <skipped message="no"/></testcase>
      <testcase classname="tests.e2e.test_b" name="test_four" time="1"><error/></testcase>
    </testsuite></testsuites>""")
    counts = lanes.read_report(report)
    assert (counts.passed, counts.failed, counts.skipped) == (1, 2, 1)
    assert counts.modules == {"tests.e2e.test_a": 12.0, "tests.e2e.test_b": 3.0}
    assert counts.line() == "1 passed, 2 failed, 1 skipped"
    assert lanes.read_report(tmp_path / "absent.xml").line() == "0 passed, 0 failed, 0 skipped"


def test_a_failed_runs_report_starts_at_pytests_failures_section() -> None:
    log = "collected 3\n....F\n===== FAILURES =====\n___ test_x ___\nE boom\n" \
          "=== short test summary info ===\nFAILED tests/e2e/test_a.py::test_x - boom\n"
    shown = lanes.failures(log)
    assert shown.startswith("===== FAILURES =====")
    assert "FAILED tests/e2e/test_a.py::test_x - boom" in shown
    assert lanes.failures("no sections\nat all") == "no sections\nat all"


def test_a_failed_lanes_sandbox_logs_outlive_its_temporary_folder(tmp_path: Path) -> None:
    """The lane's temporary folder is one per host, deleted by the lane's next run from
    any clone: the logs a failure left there (the in-cluster operator's, the sandbox's,
    the events) are copied beside the run's log, and nothing else is."""
    temp, into = tmp_path / "temp", tmp_path / "kept"
    (temp / "real-operator0" / "sandbox-logs" / "control-plane").mkdir(parents=True)
    (temp / "real-operator0" / "operator.log").write_text("==== leader\nbecame the leader\n")
    (temp / "real-operator0" / "sandbox-logs" / "events.txt").write_text("Killing\n")
    (temp / "real-operator0" / "sandbox-logs" / "control-plane" / "kube-apiserver.log"
     ).write_text("I1207\n")
    (temp / "real-operator0" / "checkpoint.pt").write_bytes(b"weights")
    assert lanes.keep_evidence(temp, into) == into
    assert sorted(str(p.relative_to(into)) for p in into.rglob("*") if p.is_file()) == [
        "real-operator0/operator.log",
        "real-operator0/sandbox-logs/control-plane/kube-apiserver.log",
        "real-operator0/sandbox-logs/events.txt"]
    assert (into / "real-operator0" / "operator.log").read_text().endswith("leader\n")
    assert lanes.keep_evidence(tmp_path / "empty", tmp_path / "none") is None
    assert not (tmp_path / "none").exists()


def test_a_step_whose_need_failed_never_starts_and_says_which() -> None:
    run = lanes.Run([])
    run.declare("build", "after")
    started = threading.Event()

    def broken(step: lanes.Step) -> None:
        raise RuntimeError("go build failed")
    run.after(["build"], "after", lambda step: started.set()).join(timeout=0.01)
    run.step("build", broken)
    run.steps["after"].done.wait(timeout=5)
    assert not started.is_set()
    assert run.steps["after"].ok is False
    assert run.steps["after"].note == "RuntimeError: not started: build failed"
    assert run.steps["build"].note == "RuntimeError: go build failed"


def test_a_failed_pytest_run_keeps_the_failures_it_recorded_for_the_summary() -> None:
    """CI once printed `1 failed` for the unit lane and not which test: the step's
    failure handler blanked the report the pytest run had just recorded."""
    run = lanes.Run([])

    def failing_pytest(step: lanes.Step) -> None:
        step.detail = "FAILED tests/unit/test_a.py::test_x - boom"
        raise RuntimeError("pytest exited 1")
    step = run.step("unit", failing_pytest)
    assert step.ok is False
    assert step.detail == "FAILED tests/unit/test_a.py::test_x - boom"


def test_the_kind_image_waits_for_every_binary_it_holds() -> None:
    from goodput_operator.sandbox import kindnode
    assert set(lanes.KIND_IMAGE_PARTS) == {c.name for c in kindnode.COMPONENTS} | {"kind"}
