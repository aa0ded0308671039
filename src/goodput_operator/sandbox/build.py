"""Build the sandbox's upstream binaries from their Go modules, cached per version.

Upstream modules such as k8s.io/kubernetes replace their own sub-modules with relative
paths (`k8s.io/api => ./staging/src/k8s.io/api`), and a depending module does not inherit
those replaces. So each component is built from a small generated wrapper module that
re-pins every relative replace to the published version — read from the upstream go.mod,
never hand-listed. Components that share most of their packages (versions.SHARED_GRAPH)
are each built in a wrapper that resolves the whole group, so they compile one set of
dependency versions and Go's build cache compiles a shared package once. Binaries live
in ``<cache>/bin/<component>-<version>[-<hash>]/`` and are never committed; Go's own
module and build caches make rebuilds cheap.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from goodput_operator.sandbox.versions import (
    MIN_GO,
    SANDBOX_COMPONENTS,
    Component,
    graph_of,
    wrapper_module,
)

Progress = Callable[[str], None]

COMPILER_GOGC = "400"
"""The Go compiler's own garbage collector, run less often (a `GOGC` of the caller's wins).
The compiler spends much of its time collecting garbage it has memory for: CoreDNS built
from an empty build cache on the 2-core machine took 308 and 317 CPU-seconds (176 s and
193 s wall) with Go's default of 100, 251 and 236 (135 s, 123 s) with 400, at under 700 MB
per compile; 800 and `off` saved nothing more."""

_RELATIVE_REPLACE = re.compile(r"^\s*(?:replace\s+)?(\S+)\s+=>\s+\.\.?/", re.MULTILINE)
_REQUIRE_BLOCK = re.compile(r"^require\s*\((.*?)^\)", re.MULTILINE | re.DOTALL)
_REQUIRE_LINE = re.compile(r"^require\s+(\S+)\s+v", re.MULTILINE)


class BuildError(RuntimeError):
    """A build step failed; the message is one line that says what to do, and LOG (when
    there is one) holds everything the step printed."""

    def __init__(self, message: str, log: Path | None = None) -> None:
        super().__init__(message)
        self.log = log

    def tail(self, lines: int = 20) -> str:
        """The last LINES lines of the step's log ('' without one), for a report."""
        if self.log is None or not self.log.is_file():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def cache_root() -> Path:
    """Where binaries and wrapper modules live (``$GOODPUT_CACHE`` overrides)."""
    env = os.environ.get("GOODPUT_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "goodput-operator"


def bin_dir(component: Component) -> Path:
    return cache_root() / "bin" / component.key


def binary_path(component: Component, name: str) -> Path:
    return bin_dir(component) / name


def is_built(component: Component) -> bool:
    return all(binary_path(component, b).is_file() for b in component.binaries.values())


def required_modules(go_mod: str) -> set[str]:
    modules = set(_REQUIRE_LINE.findall(go_mod))
    for block in _REQUIRE_BLOCK.findall(go_mod):
        modules.update(line.split()[0] for line in block.splitlines()
                       if line.strip() and not line.strip().startswith("//"))
    return modules


def relative_replaces(upstream_go_mod: str) -> list[str]:
    """Required modules that the upstream go.mod replaces with a relative directory.

    Replaces of modules it does not require are guards (etcd points
    `go.etcd.io/etcd => ./FORBIDDEN_DEPENDENCY`) and are left out.
    """
    replaced = set(_RELATIVE_REPLACE.findall(upstream_go_mod))
    return sorted(replaced & required_modules(upstream_go_mod))


def build_flags(component: Component) -> list[str]:
    """`go build`'s flags: reproducible paths, version stamps, and no debug information.

    `-s -w` strips DWARF at link time, so generating it in every compile is wasted work:
    `-gcflags=all=-dwarf=false` cut CoreDNS's cold build from 222 to 178 CPU-seconds
    (126 s to 102 s wall) on the 2-core machine, and the cold run is CPU bound.
    """
    return ["-trimpath", "-gcflags=all=-dwarf=false", "-ldflags", ldflags(component)]


def ldflags(component: Component) -> str:
    stamps = " ".join(f"-X {var}={value}" for var, value in sorted(component.version_vars.items()))
    return f"-s -w {stamps}".strip()


def go_binary_name(package: str) -> str:
    """The file name `go build -o DIR/` gives a command: its last path element, or the one
    before a major-version suffix (`go.etcd.io/etcd/server/v3` -> `server`)."""
    parts = package.rstrip("/").split("/")
    if len(parts) > 1 and re.fullmatch(r"v\d+", parts[-1]):
        return parts[-2]
    return parts[-1]


def print_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def find_go() -> str:
    """The `go` command, checked to be new enough; a one-line error says how to fix it."""
    go = shutil.which("go") or next(
        (p for p in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go") if Path(p).is_file()), None
    )
    need = ".".join(map(str, MIN_GO))
    if go is None:
        raise BuildError(
            f"Go >= {need} is needed to build the sandbox's Kubernetes binaries and was not "
            f"found: install Go {need} or newer and put `go` on PATH."
        )
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False)
    match = re.match(r"go(\d+)\.(\d+)", out.stdout.strip())
    if not match or (int(match[1]), int(match[2])) < MIN_GO:
        raise BuildError(
            f"{go} is {out.stdout.strip() or 'unusable'}; the sandbox needs Go >= {need}: "
            "install a newer Go and put it first on PATH."
        )
    return go


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise builds of one component across processes (a CLI and a test run, say)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class _Go:
    """Runs go commands in one wrapper module, turning failures into BuildError."""

    def __init__(self, go: str, workdir: Path, keep_log: bool = False) -> None:
        self.go = go
        self.workdir = workdir
        self.keep_log = keep_log  # a component's build: its output kept in LOG
        self.env = {"GOGC": COMPILER_GOGC, **os.environ, "CGO_ENABLED": "0",
                    "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}

    @property
    def log(self) -> Path:
        """Every go command's stderr in this module, kept for a failure's report."""
        return self.workdir / "build.log"

    def run(self, *args: str) -> str:
        proc = subprocess.run(
            [self.go, *args], cwd=self.workdir, env=self.env, capture_output=True, text=True,
            check=False,
        )
        if self.keep_log:
            with self.log.open("a") as log:
                log.write(f"$ go {' '.join(args)}\n{proc.stderr}")
        if proc.returncode != 0:
            raise BuildError(_one_line_failure(args, proc.stderr), self.log)
        return proc.stdout

    def build_with_progress(self, args: Sequence[str], total: int, label: str,
                            progress: Progress) -> None:
        """`go build -v` prints each package it compiles; count them against the total."""
        proc = subprocess.Popen(
            [self.go, "build", "-v", *args], cwd=self.workdir, env=self.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        assert proc.stderr is not None
        compiled = 0
        errors: list[str] = []
        log = self.log.open("a")  # only a component's build compiles: its log is kept
        log.write(f"$ go build -v {' '.join(args)}\n")
        started = time.monotonic()
        stop = threading.Event()

        def heartbeat() -> None:
            while not stop.wait(15):
                elapsed = int(time.monotonic() - started)
                progress(f"  {label}: {compiled}/{total} packages compiled, {elapsed}s elapsed")

        ticker = threading.Thread(target=heartbeat, daemon=True)
        ticker.start()
        try:
            for line in proc.stderr:
                log.write(line)
                line = line.rstrip()
                if re.match(r"^[\w.\-]+(/[\w.\-~]+)*$", line):
                    compiled += 1
                else:
                    errors.append(line)
            proc.wait()
        finally:
            stop.set()
            log.close()
        if proc.returncode != 0:
            raise BuildError(_one_line_failure(("build", *args), "\n".join(errors)), self.log)


def _one_line_failure(args: Sequence[str], stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    detail = lines[-1] if lines else "no output"
    hint = ""
    if re.search(r"dial tcp|proxy\.golang\.org|TLS handshake|no such host", stderr):
        hint = " (the Go module proxy was not reachable: check GOPROXY and the network)"
    elif re.search(r"requires go >=|toolchain", stderr):
        hint = " (this Go is too old for a pinned module: install a newer Go)"
    return f"go {' '.join(args[:2])} failed: {detail}{hint}"


def _module_info(go: _Go, module: str, version: str) -> dict[str, str]:
    info: dict[str, str] = json.loads(go.run("mod", "download", "-json", f"{module}@{version}"))
    if "Error" in info:
        raise BuildError(f"cannot download {module}@{version}: {info['Error']}")
    return info


def module_dir(component: Component, go_cmd: str | None = None) -> Path:
    """The component's upstream source in Go's module cache (downloaded if needed)."""
    go = _Go(go_cmd or find_go(), cache_root())
    cache_root().mkdir(parents=True, exist_ok=True)
    return Path(_module_info(go, component.module, component.version)["Dir"])


def graph_replaces(graph: Sequence[Component], go_mods: Sequence[str]) -> dict[str, str]:
    """Every relative replace of the graph's upstream go.mods (GO_MODS, in GRAPH's order),
    pinned to the version its component names; a module two members pin differently is a
    graph that cannot be built, said before Go is asked."""
    members = {m.module for m in graph}
    pins: dict[str, str] = {}
    for component, go_mod in zip(graph, go_mods, strict=True):
        if not component.replace_version:
            continue
        for mod in relative_replaces(go_mod):
            pinned = pins.setdefault(mod, component.replace_version)
            if pinned != component.replace_version:
                raise BuildError(f"{mod} is pinned to both {pinned} and "
                                 f"{component.replace_version} in {component.name}'s graph")
    return {mod: version for mod, version in pins.items() if mod not in members}


def graph_requirements(graph: Sequence[Component]) -> list[str]:
    """What `go get` asks for: each member's commands at its version, or, where the
    wrapper's own main is the command, the member's packages that main imports. Not the
    module's root: CoreDNS's root is its own main, and asking for it downloads the
    dependencies of every plugin it ships (cloud SDKs, tracing) into every member's
    wrapper, although none of them is compiled."""
    wanted: list[str] = []
    for m in graph:
        packages = list(m.binaries) if m.main_go is None else main_imports(m)
        wanted += [f"{pkg}@{m.version}" for pkg in packages]
    return wanted


def main_imports(component: Component) -> list[str]:
    """The packages of COMPONENT's own module that its wrapper's main imports."""
    imported = re.findall(r'"([^"\s]+)"', component.main_go or "")
    return sorted({pkg for pkg in imported
                   if pkg == component.module or pkg.startswith(component.module + "/")})


def _prepare_wrapper(go: _Go, component: Component) -> None:
    """A wrapper module that resolves COMPONENT's whole graph, so every member compiles the
    same dependency versions and shares one build cache."""
    go.workdir.mkdir(parents=True, exist_ok=True)
    if go.keep_log:
        go.log.write_text("")  # this build's output alone
    module = f"module {wrapper_module(component.name)}\n\ngo 1.26\n"
    (go.workdir / "go.mod").write_text(module)
    (go.workdir / "go.sum").unlink(missing_ok=True)
    graph = graph_of(component)
    go_mods = [Path(_module_info(go, m.module, m.version)["GoMod"]).read_text() for m in graph]
    pins = graph_replaces(graph, go_mods)
    edits = [f"-replace={mod}={mod}@{v}" for mod, v in sorted(pins.items())]
    edits += [f"-replace={old}={new}" for m in graph for old, new in sorted(m.replaces.items())]
    if edits:
        go.run("mod", "edit", *edits)
    main = go.workdir / "main.go"
    if component.main_go is None:
        main.unlink(missing_ok=True)
    else:  # the wrapper's own command: it needs the upstream module, not a command of it
        main.write_text(component.main_go)
    go.run("get", *graph_requirements(graph))


def build(component: Component, progress: Progress = print_progress) -> Path:
    """Build one component's binaries unless they are already cached; return their folder."""
    target = bin_dir(component)
    with _locked(cache_root() / "locks" / f"{component.key}.lock"):
        if is_built(component):
            return target
        go = _Go(find_go(), cache_root() / "build" / component.key, keep_log=True)
        progress(f"Building {component.name} {component.version} from Go modules "
                 "(first time only; cached afterwards)...")
        started = time.monotonic()
        _prepare_wrapper(go, component)
        packages = list(component.binaries)
        total = len(go.run("list", "-deps", *packages).split())
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        args = [*build_flags(component), "-o", f"{staging}/", *packages]
        go.build_with_progress(args, total, component.name, progress)
        for pkg, name in component.binaries.items():
            built = staging / go_binary_name(pkg)
            if built.name != name:
                built.rename(staging / name)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        progress(f"Built {component.name} {component.version} in "
                 f"{time.monotonic() - started:.0f}s -> {target}")
        return target


def ensure_all(components: Sequence[Component] = SANDBOX_COMPONENTS,
               progress: Progress = print_progress) -> dict[str, Path]:
    """Build what is missing and return every binary's path by name."""
    paths: dict[str, Path] = {}
    for component in components:
        folder = build(component, progress)
        paths |= {name: folder / name for name in component.binaries.values()}
    return paths
