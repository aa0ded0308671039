"""`make test`: every test, in the time two cores allow.

What needs no cluster (lint, types, generated files, the unit suite) runs while the
sandbox's components build in the background. The cluster tests run in *lanes*: pytest
processes of their own that share no sandbox, each started as soon as the components it
needs are built, each with its own log, temporary folder and JUnit report. What two lanes
could both want on this host (real-node slots, kube-proxy, bridges, kwokctl's ports, the
image stores, a component's build) is taken through the sandbox's host-wide records and
locks, so lanes never collide. The run ends with one summary: each step's time, each lane's
counts and failures (by test id, as pytest names them), the slowest modules, and a closing
`N passed, N failed, N skipped` line.

    python -m tests.lanes [PYTEST_OPTION ...]    # options go to every pytest run (-k, -x)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "build" / "test-logs"
TEMP = Path("/tmp/goodput-lanes")  # each pytest run's --basetemp beneath (short paths)
TICK_SECONDS = 60  # one progress line this often while anything runs
FAILURE_LINES = 300  # of a failed run's log, printed in the summary
KEPT_FILE_BYTES = 64 << 20  # a log larger is not worth keeping whole (a dump, a core)


@dataclass(frozen=True)
class Lane:
    """One pytest process over tests that share its sandbox and nothing else."""

    name: str
    args: tuple[str, ...]
    needs: tuple[str, ...]  # steps (below) that must be done before it starts
    sandbox: str  # the session sandbox's name, should any of its tests ask for one
    # its session operator's requests count in the RBAC audit of the whole suite, which
    # another lane runs (test_chart_rbac.py): written to audit_file() as the lane ends
    audited: bool = False

    def audit_file(self) -> Path:
        return LOGS / f"{self.name}.audited.json"


REAL_NODES = "tests/e2e/test_real_nodes.py"
# simulated-fleet modules with a session sandbox of their own, so that the fleet's e2e
# modules take two lanes' time instead of one's (docs/testing.md, the time budget)
FLEET_2 = ("tests/e2e/test_inference.py", "tests/e2e/test_recovery.py",
           "tests/e2e/test_hostile.py", "tests/e2e/test_topology.py",
           "tests/e2e/test_fleets.py")
SANDBOX_PARTS = ("host packages", "kubernetes", "etcd", "kwok")
LANES = (
    # the real-node module brings its own sandbox with real kubelets and the chart in-cluster
    Lane("real-nodes", (REAL_NODES,), (*SANDBOX_PARTS, "helm", "coredns", "images"),
         "goodput-test-real"),
    # every other cluster test shares a session sandbox (the multicluster module adds
    # three of its own beside it); Kueue and helm are built on demand under their locks
    Lane("fleet", ("tests/integration", "tests/e2e", f"--ignore={REAL_NODES}",
                   *(f"--ignore={module}" for module in FLEET_2)), SANDBOX_PARTS,
         "goodput-test"),
    Lane("fleet-2", FLEET_2, SANDBOX_PARTS, "goodput-test-2", audited=True),
    # a real kind cluster (goodput kind up): the chart, a job, a failure, a scale, and the
    # host left as found; its node image is assembled once the binaries it holds are built
    Lane("kind", ("tests/kind/test_kind.py",), ("kind image", "images", "helm"),
         "goodput-test-kind"),
)


@dataclass
class Step:
    """Something the run does, with its outcome and the time it took."""

    name: str
    started: float = 0.0
    ended: float = 0.0
    ok: bool | None = None  # None: not finished (or never started)
    note: str = ""  # "cached", counts, or why it failed
    detail: str = ""  # a failure's log tail
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def seconds(self) -> float:
        return (self.ended or time.monotonic()) - self.started if self.started else 0.0


@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    modules: dict[str, float] = field(default_factory=dict)  # module -> seconds

    def add(self, other: Counts) -> None:
        self.passed += other.passed
        self.failed += other.failed
        self.skipped += other.skipped
        for module, seconds in other.modules.items():
            self.modules[module] = self.modules.get(module, 0.0) + seconds

    def line(self) -> str:
        return f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped"


class Run:
    """The steps of one `make test`, their threads, and what they print."""

    def __init__(self, pytest_options: Sequence[str]) -> None:
        self.options = list(pytest_options)
        self.started = time.monotonic()
        self.steps: dict[str, Step] = {}
        self.counts: dict[str, Counts] = {}
        self.children: list[subprocess.Popen[bytes]] = []
        self.printing = threading.Lock()

    def say(self, message: str) -> None:
        with self.printing:
            print(message, file=sys.stderr, flush=True)

    def step(self, name: str, work: Callable[[Step], None]) -> Step:
        """Run WORK as step NAME on this thread; a failure is recorded, never raised."""
        step = self.steps.setdefault(name, Step(name))
        step.started = time.monotonic()
        try:
            work(step)
            step.ok = True
        except Exception as err:  # a failed step fails the run, after the others
            step.ok = False
            step.note = f"{type(err).__name__}: {err}"
            tail = getattr(err, "tail", None)
            if callable(tail):  # else keep what the work recorded (a pytest run's failures)
                step.detail = tail()
            self.say(f"FAILED {name}: {step.note}")
        finally:
            step.ended = time.monotonic()
            step.done.set()
        return step

    def declare(self, *names: str) -> None:
        for name in names:
            self.steps.setdefault(name, Step(name))

    def after(self, needs: Sequence[str], name: str, work: Callable[[Step], None]
              ) -> threading.Thread:
        """A thread that runs step NAME once the steps NEEDS are done; if one of them
        failed, NAME fails without starting."""
        def wait_then_run() -> None:
            for need in needs:
                self.steps[need].done.wait()
            failed = [need for need in needs if not self.steps[need].ok]

            def refused(step: Step) -> None:
                raise RuntimeError(f"not started: {', '.join(failed)} failed")
            self.step(name, refused if failed else work)
        thread = threading.Thread(target=wait_then_run, name=name, daemon=True)
        thread.start()
        return thread

    def pytest(self, step: Step, label: str, args: Sequence[str],
               env: dict[str, str] | None = None) -> None:
        """pytest ARGS (and the run's options) with its output in LOGS/LABEL.log."""
        log, report = LOGS / f"{label}.log", LOGS / f"{label}.xml"
        report.unlink(missing_ok=True)
        TEMP.mkdir(parents=True, exist_ok=True)  # pytest makes only the last folder
        command = [sys.executable, "-m", "pytest", *args, *self.options,
                   f"--junitxml={report}", "-o", "junit_duration_report=total",
                   f"--basetemp={TEMP / label}"]
        with log.open("wb") as out:
            child = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})},
                                     start_new_session=True)
            self.children.append(child)
            code = child.wait()
        counts = read_report(report)
        self.counts[label] = counts
        step.note = f"{counts.line()}  (log: {log.relative_to(ROOT)})"
        if code not in (0, 5):  # 5: nothing collected (a -k that selects none of it)
            kept = keep_evidence(TEMP / label, LOGS / "kept" / label)
            step.detail = failures(log.read_text(errors="replace"))
            raise RuntimeError(f"pytest exited {code}: {counts.line()}; log: {log}"
                               + (f"; sandbox logs kept in {kept}" if kept else ""))


def keep_evidence(temp: Path, into: Path) -> Path | None:
    """The logs a failed run left in its temporary folder (the in-cluster operator's, the
    control plane's, the cluster DNS's, the events: what the fixtures save on a failure),
    copied into INTO beside the run's own log: TEMP is one folder per lane on the host,
    so the next run of the lane, from any clone, would delete them. None: nothing kept."""
    found = [path for pattern in ("*.log", "*events.txt") for path in temp.rglob(pattern)
             if path.is_file() and path.stat().st_size <= KEPT_FILE_BYTES]
    if not found:
        return None
    shutil.rmtree(into, ignore_errors=True)
    for path in found:
        target = into / path.relative_to(temp)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return into


def read_report(report: Path) -> Counts:
    """Counts and per-module seconds from pytest's JUnit XML (absent: nothing ran)."""
    counts = Counts()
    if not report.is_file():
        return counts
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        module = re.sub(r"\.Test\w+$", "", case.get("classname", ""))  # a class's module
        counts.modules[module] = counts.modules.get(module, 0.0) + float(case.get("time", 0))
        outcome = {child.tag for child in case}
        if outcome & {"failure", "error"}:
            counts.failed += 1
        elif "skipped" in outcome:
            counts.skipped += 1
        else:
            counts.passed += 1
    return counts


def failures(log: str) -> str:
    """A pytest log's failure reports and short summary, as pytest printed them."""
    start = re.search(r"^=+ (FAILURES|ERRORS) =+$", log, re.MULTILINE)
    lines = log[start.start():].splitlines() if start else log.splitlines()
    return "\n".join(lines[-FAILURE_LINES:])


def progress_of(label: str) -> str:
    """How far a pytest run is: tests done of those collected, from its log's progress
    lines (`tests/e2e/test_x.py ..F.s   [ 45%]`)."""
    log = LOGS / f"{label}.log"
    if not log.is_file():
        return "waiting"
    text = log.read_text(errors="replace")
    collected = re.search(r"collected (\d+) items?", text)
    if not collected:
        return "starting"
    marks = re.compile(r"^(?:tests/\S+ )?([.FEsxX]+)\s*(?:\[\s*\d+%\])?$")  # wraps too
    done = sum(len(found[1]) for found in map(marks.match, text.splitlines()) if found)
    return f"{done}/{collected[1]} tests"


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


# what the kind node image holds: the sandbox's binaries and kind's own pieces
KIND_IMAGE_PARTS = ("kubernetes", "etcd", "kwok", "coredns", "kind", "kubeadm", "crictl",
                    "local-path-provisioner")


def host_packages(step: Step) -> None:
    """Debian's packages the cluster tests use (as `make real-node-deps kind-deps
    prometheus haproxy`)."""
    for script in ("install-real-node-deps.sh", "install-kind-deps.sh",
                   "install-prometheus.sh", "install-haproxy.sh"):
        proc = subprocess.run(["bash", str(ROOT / "scripts" / script)], capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            step.detail = (proc.stderr or proc.stdout)[-3000:]
            raise RuntimeError(f"scripts/{script} exited {proc.returncode}")


def build_components(run: Run) -> None:
    """Every component the suite uses, one after another (each go build already uses both
    cores), in the order the lanes need them; each is its own step."""
    from goodput_operator.sandbox import build, versions

    # kind's pieces last: the fleet lane's Kueue tests wait for Kueue, and the kind lane
    # (two minutes, warm) has the rest of the run to end in
    for component in (*versions.ALL_COMPONENTS, *versions.KIND_COMPONENTS):
        def one(step: Step, component: versions.Component = component) -> None:
            if build.is_built(component):
                step.note = "cached"
            build.build(component, progress=run.say)
        run.step(component.name, one)


def images(step: Step) -> None:
    """The real nodes' images (pause, worker) and the operator image from the Dockerfile,
    built once for the run, beside the Go builds (debootstrap mostly waits on the mirror)."""
    from goodput_operator import __version__
    from goodput_operator.sandbox import hostnet, operator_image
    from goodput_operator.sandbox import images as sandbox_images

    reason = hostnet.unavailable_reason()
    if reason:  # the real-node tests skip with this reason
        step.note = f"not built: {reason}"
        return
    started = time.monotonic()
    sandbox_images.ensure_images(lambda line: None)
    operator_image.build_image(__version__, progress=lambda line: None)
    step.note = f"ready in {time.monotonic() - started:.0f}s"


def kind_layers(step: Step) -> None:
    """The Debian roots of kind's node image and of its kube-proxy (debootstrap: about two
    minutes cold, mostly waiting on the mirror), made beside the Go builds once the real
    nodes' images are, instead of after kind's pieces, where the kind lane waits for its
    image at the end of a cold run."""
    from goodput_operator.sandbox import kind, kindnode

    reason = kind.unavailable_reason()
    if reason:
        step.note = f"not built: {reason}"
        return
    started = time.monotonic()
    kindnode.node_layer(lambda line: None)
    kindnode.proxy_layer(lambda line: None)
    step.note = f"ready in {time.monotonic() - started:.0f}s"


def kind_image(step: Step) -> None:
    """kind's node image (sandbox/kindnode.py), assembled once its binaries are built; where
    kind cannot run, the kind lane skips with the same reason."""
    from goodput_operator.sandbox import kind, kindnode

    reason = kind.unavailable_reason()
    if reason:
        step.note = f"not built: {reason}"
        return
    started = time.monotonic()
    image = kindnode.node_image(kind.podman, lambda line: None)
    step.note = f"{image.name.rsplit(':', 1)[-1]} ready in {time.monotonic() - started:.0f}s"


def verify(run: Run) -> None:
    """Lint, types and generated files: each its own step, all of them run."""
    bin_dir = Path(sys.executable).parent
    checks = {
        "ruff": [str(bin_dir / "ruff"), "check", "src", "tests", "bench", "examples"],
        "mypy": [str(bin_dir / "mypy")],
        "generated files": [sys.executable, "-m", "goodput_operator.generate", "--check"],
    }
    for name, command in checks.items():
        def check(step: Step, name: str = name, command: list[str] = command) -> None:
            proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                                  check=False)
            if proc.returncode != 0:
                step.detail = (proc.stdout + proc.stderr)[-6000:]
                raise RuntimeError(f"{name} failed")
        run.step(name, check)


def lane_env(spec: Lane, others: Sequence[Lane]) -> dict[str, str]:
    """SPEC's session sandbox's name and, for the RBAC audit's "whole suite", the modules
    the other lanes run and the files where the audited ones say what their operators did
    (and, for an audited lane, where it says so itself)."""
    elsewhere = " ".join(Path(arg).name for other in others for arg in other.args
                         if arg.endswith(".py") and not arg.startswith("-"))
    env = {"GOODPUT_TEST_SANDBOX": spec.sandbox, "GOODPUT_TEST_ELSEWHERE": elsewhere,
           "GOODPUT_TEST_AUDITED_IN": os.pathsep.join(
               str(other.audit_file()) for other in others if other.audited)}
    if spec.audited:
        env["GOODPUT_TEST_AUDIT_OUT"] = str(spec.audit_file())
    return env


def lane(run: Run, spec: Lane, others: Sequence[Lane]) -> Callable[[Step], None]:
    """SPEC's pytest run (lane_env). An audited lane's file is written whatever happens (a
    note of why it holds no audit, if the lane wrote none), so an audit waiting on it
    always ends."""
    env = lane_env(spec, others)

    def work(step: Step) -> None:
        try:
            run.pytest(step, spec.name, spec.args, env=env)
        finally:
            if spec.audited and not spec.audit_file().is_file():
                spec.audit_file().write_text(json.dumps(
                    {"absent": f"lane {spec.name} ended without its operator's audit"}))
    return work


def ticker(run: Run, stop: threading.Event) -> None:
    """One line a minute: what is building, and how far each pytest run is."""
    while not stop.wait(TICK_SECONDS):
        busy = [f"{name}: {progress_of(name.removeprefix('lane '))}"
                if name == "unit" or name.startswith("lane ") else f"{name}: running"
                for name, step in run.steps.items() if step.started and not step.done.is_set()]
        run.say(f"[{minutes(time.monotonic() - run.started)}] " + " | ".join(busy))


def summary(run: Run) -> bool:
    """Print each step's time and outcome, failures in full, the slowest modules and the
    closing counts; True when everything passed."""
    total = Counts()
    for counts in run.counts.values():
        total.add(counts)
    lines = ["", "== make test: timing =="]
    for step in run.steps.values():
        state = {True: "ok", False: "FAILED", None: "not run"}[step.ok]
        at = f"at {minutes(step.started - run.started)}" if step.started else ""
        lines.append(f"  {step.name:<18} {minutes(step.seconds):>14}  {at:<16} {state:<7} "
                     f"{step.note}")
    lines.append(f"  {'total':<18} {minutes(time.monotonic() - run.started):>14}")
    slowest = sorted(total.modules.items(), key=lambda kv: -kv[1])[:12]
    lines.append("  slowest modules: " + ", ".join(
        f"{module.rsplit('.', 1)[-1]} {seconds / 60:.1f} min" for module, seconds in slowest))
    for step in run.steps.values():
        if step.ok is False and step.detail:
            lines += ["", f"== {step.name}: {step.note} ==", step.detail]
    ok = all(step.ok for step in run.steps.values()) and total.passed > 0
    LOGS.joinpath("summary.json").write_text(json.dumps({
        "seconds": round(time.monotonic() - run.started),
        "steps": {s.name: {"ok": s.ok, "seconds": round(s.seconds), "note": s.note,
                           "at": round(s.started - run.started) if s.started else None}
                  for s in run.steps.values()},
        "modules": {m: round(sec, 1) for m, sec in sorted(total.modules.items())},
        "passed": total.passed, "failed": total.failed, "skipped": total.skipped}, indent=1))
    lines += ["", total.line()]
    run.say("\n".join(lines))
    return ok


def interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # a SIGTERM stops the lanes as Ctrl-C does


def main(argv: Sequence[str]) -> int:
    from goodput_operator.sandbox.versions import KIND_COMPONENTS

    LOGS.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, interrupted)
    # started in the background, a shell leaves SIGINT ignored, and an ignored signal stays
    # ignored across exec: the lanes' pytest runs would never hear the stop below
    signal.signal(signal.SIGINT, signal.default_int_handler)
    run = Run(argv)
    for spec in LANES:
        spec.audit_file().unlink(missing_ok=True)  # a file from the last run is not this one's
    run.declare("host packages", "kubernetes", "etcd", "kwok", "helm", "coredns",
                "versitygw", "kueue", *(c.name for c in KIND_COMPONENTS), "images",
                "kind layers", "kind image", "ruff", "mypy", "generated files", "unit",
                *(f"lane {spec.name}" for spec in LANES))
    stop = threading.Event()
    threading.Thread(target=ticker, args=(run, stop), daemon=True).start()
    builder = threading.Thread(target=build_components, args=(run,), daemon=True)
    builder.start()
    threads = [builder, run.after([], "host packages", host_packages),
               run.after(["host packages"], "images", images),
               run.after(["images"], "kind layers", kind_layers),
               run.after(["kind layers", *KIND_IMAGE_PARTS], "kind image", kind_image),
               *(run.after(spec.needs, f"lane {spec.name}",
                           lane(run, spec, [o for o in LANES if o is not spec]))
                 for spec in LANES)]
    try:
        verify(run)
        run.step("unit", lambda step: run.pytest(step, "unit", ["tests/unit", "-m", "unit"]))
        for thread in threads:
            thread.join()
    except KeyboardInterrupt:  # each pytest tears its sandboxes down on SIGINT
        for child in run.children:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGINT)
        for child in run.children:
            child.wait()
        raise
    finally:
        stop.set()
    return 0 if summary(run) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
