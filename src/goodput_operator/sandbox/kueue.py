"""Kueue beside a sandbox (`goodput sandbox up --kueue`), and MultiKueue between sandboxes
(`goodput sandbox connect MANAGER WORKER...`): several sandboxes side by side stand in for
regions.

Kueue's manager runs as a plain process against the sandbox's API server, built from its Go
module like the control plane (cached). Three things it needs that a Deployment would get
from its manifests, done here instead:
- its webhooks cannot be switched off: it serves them on 127.0.0.1 with a certificate of a
  CA made for the sandbox, and they are registered by `url` + `caBundle`, only those of
  Kueue's own kinds and of batch Jobs (the other integrations are not enabled);
- with its internal certificate management off it reads a metrics certificate from a fixed
  path (`METRICS_CERTS`), so one is written there (root, as real nodes need);
- its visibility API server is on by default and would need an APIService: switched off
  (feature gate VisibilityOnDemand=false).
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from goodput_operator.api.base import GROUP, VERSION
from goodput_operator.sandbox import build, procs
from goodput_operator.sandbox.build import Progress
from goodput_operator.sandbox.cluster import (
    Sandbox,
    SandboxError,
    require_running,
    wait_established,
)
from goodput_operator.sandbox.versions import KUEUE_COMPONENT, Component

NAMESPACE = "kueue-system"
METRICS_CERTS = Path("/etc/kueue/metrics/certs")
MULTIKUEUE = "kueue.x-k8s.io/multikueue"  # the admission checks' controller
ALL_WORKERS = "multikueue"  # the admission check (and config) that dispatches to every worker
# the kinds whose Workloads our operator makes (integrations.externalFrameworks)
FRAMEWORKS = (f"TrainingJob.{VERSION}.{GROUP}", f"InferenceEndpoint.{VERSION}.{GROUP}")
_WEBHOOK_GROUPS = {"kueue.x-k8s.io", "batch"}  # the webhooks registered (see above)
_WEBHOOK_CONFIGS = ("goodput-kueue-mutating", "goodput-kueue-validating")


def home(sandbox: Sandbox) -> Path:
    return sandbox.home / "kueue"


def pidfile(sandbox: Sandbox) -> Path:
    return home(sandbox) / "kueue.pid"


def running(sandbox: Sandbox) -> bool:
    return procs.alive(pidfile(sandbox))


def _openssl(folder: Path, *args: str) -> None:
    proc = subprocess.run(["openssl", *args], cwd=folder, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise SandboxError(f"openssl {args[0]} failed: {proc.stderr.strip()[-300:]}")


def certificates(folder: Path) -> bytes:
    """A CA for this sandbox's Kueue and a serving certificate for 127.0.0.1 it signed
    (tls.crt, tls.key in FOLDER, where controller-runtime looks); the CA's PEM."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "tls.crt").is_file():
        (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        _openssl(folder, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                 "ca.key", "-out", "ca.crt", "-days", "365", "-subj", "/CN=goodput-kueue-ca")
        _openssl(folder, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key",
                 "-out", "tls.csr", "-subj", "/CN=127.0.0.1")
        _openssl(folder, "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey",
                 "ca.key", "-CAcreateserial", "-out", "tls.crt", "-days", "365",
                 "-extfile", "san.cnf")
    return (folder / "ca.crt").read_bytes()


def _metrics_certs(certs: Path) -> None:
    """The fixed path Kueue's manager reads its metrics certificate from."""
    try:
        METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            target = METRICS_CERTS / name
            if not target.is_file():
                target.write_bytes((certs / name).read_bytes())
    except OSError as err:
        raise SandboxError(
            f"Kueue's manager reads its metrics certificate from {METRICS_CERTS} and it cannot "
            f"be written ({err}): run as root, or create that folder with tls.crt and tls.key"
        ) from err


def configuration(sandbox: Sandbox, ports: dict[str, int], certs: Path) -> dict[str, Any]:
    """Kueue's Configuration for this sandbox: one manager, no leader election, our
    TrainingJobs as an external framework (their Workloads are the operator's) that
    MultiKueue may dispatch (spec.managedBy)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['metrics']}"},
        "webhook": {"host": "127.0.0.1", "port": ports["webhook"], "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "featureGates": {"VisibilityOnDemand": False},
        "integrations": {"frameworks": ["batch/job"],
                         "externalFrameworks": list(FRAMEWORKS)},
        "multiKueue": {"origin": sandbox.name, "gcInterval": "30s",
                       "workerLostTimeout": "2m",
                       "externalFrameworks": [{"name": f} for f in FRAMEWORKS]},
    }


def webhook_configurations(manifests: str, port: int, ca: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, kept to Kueue's own kinds and batch Jobs, pointed at
    the manager on 127.0.0.1:PORT by url and CA."""
    bundle = base64.b64encode(ca).decode()
    found = []
    for doc, name in zip(yaml.safe_load_all(manifests), _WEBHOOK_CONFIGS, strict=True):
        hooks = []
        for hook in doc.get("webhooks") or []:
            groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            if not groups or not groups <= _WEBHOOK_GROUPS:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
            hooks.append(hook)
        found.append({**doc, "metadata": {"name": name}, "webhooks": hooks})
    return found


def ready(port: int) -> bool:
    """Whether a controller-runtime manager's health server on PORT says it is ready."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@dataclass(frozen=True)
class Prepared:
    """What a peer's manager starts from (`prepare`)."""

    binaries: Path  # the component's built binaries
    source: Path  # its Go module (CRDs, webhook manifests)
    ca: bytes  # the CA that signed its serving certificate (here/certs)
    ports: dict[str, int]  # health, metrics, webhook: free on 127.0.0.1
    started: float  # monotonic, when its start began (after the build)
    webhooks: str = "config/components/webhook/manifests.yaml"  # in SOURCE

    def webhook_manifests(self) -> str:
        return (self.source / self.webhooks).read_text()


def prepare(sandbox: Sandbox, component: Component, title: str, namespace: str,
            here: Path, pid: Path, progress: Progress,
            layout: tuple[str, str] = ("config/components/crd/bases",
                                       "config/components/webhook/manifests.yaml"),
            ) -> Prepared:
    """A peer's manager made ready to start for SANDBOX (Kueue here, JobSet and LWS in
    sandbox/jobset.py and sandbox/lws.py): built (first time), its CRDs served, its
    namespace made, a manager left from an earlier start stopped, a certificate for
    127.0.0.1 in HERE/certs, ports. LAYOUT: where its module keeps its CRDs (a folder) and
    its webhook manifests (a file), kubebuilder's paths differ by project."""
    require_running(sandbox)
    binaries = build.build(component, progress)
    source = build.module_dir(component)
    progress(f"Starting {title} {component.version} for sandbox {sandbox.name!r}...")
    started = time.monotonic()
    crds = str(source / layout[0])
    sandbox.kubectl("apply", "--server-side", "--force-conflicts", "-f", crds, timeout=120)
    # served before the manager starts: it exits at once on a kind it cannot map yet
    wait_established(sandbox.kubeconfig, "-f", crds)
    sandbox.kubectl("create", "namespace", namespace, check=False)
    procs.kill_pidfile(pid)
    here.mkdir(parents=True, exist_ok=True)
    ca = certificates(here / "certs")
    ports = {"health": procs.free_port(), "metrics": procs.free_port(),
             "webhook": procs.free_port()}
    return Prepared(binaries, source, ca, ports, started, layout[1])


def start(sandbox: Sandbox, progress: Progress = build.print_progress) -> None:
    """Build Kueue (first time), install its CRDs and run its manager for SANDBOX; ready
    when this returns (its webhooks answer)."""
    here = home(sandbox)
    peer = prepare(sandbox, KUEUE_COMPONENT, "Kueue", NAMESPACE, here, pidfile(sandbox),
                   progress)
    _metrics_certs(here / "certs")
    config = here / "config.yaml"
    config.write_text(yaml.safe_dump(configuration(sandbox, peer.ports, here / "certs")))
    (here / "ports.json").write_text(json.dumps(peer.ports))
    hooks = webhook_configurations(peer.webhook_manifests(), peer.ports["webhook"], peer.ca)
    sandbox.apply(*hooks)
    run_manager(sandbox, "Kueue", [str(peer.binaries / "kueue"), f"--config={config}",
                                   "--zap-log-level=2"],
                here / "kueue.log", pidfile(sandbox), peer.ports["health"])
    progress(f"Kueue is up in {time.monotonic() - peer.started:.0f}s "
             f"(log: {here / 'kueue.log'}).")


def run_manager(sandbox: Sandbox, what: str, command: list[str], log: Path, pid: Path,
                health_port: int) -> None:
    """Run a peer's controller-runtime manager (COMMAND) on SANDBOX's kubeconfig until its
    health server on HEALTH_PORT says it is ready; a manager that exits or never gets
    ready is raised with its LOG named (Kueue here, JobSet in sandbox/jobset.py)."""
    procs.spawn(["env", f"KUBECONFIG={sandbox.kubeconfig}", *command], log, pid)
    try:
        procs.wait(lambda: ready(health_port) or not procs.alive(pid), 120,
                   f"{what}'s manager to be ready")
    except procs.ProcessError as err:
        raise SandboxError(f"{err}; its log: {log}") from err
    if not procs.alive(pid):
        raise SandboxError(f"{what}'s manager exited; its log: {log}")


def stop_manager(sandbox: Sandbox, pid: Path, webhook_configs: tuple[str, str]) -> None:
    """Stop a peer's manager and take its webhook configurations (mutating, validating)
    out: with their server gone they would refuse what they admit."""
    procs.kill_pidfile(pid)
    if sandbox.is_running():
        for kind, name in zip(("mutatingwebhookconfiguration", "validatingwebhookconfiguration"),
                              webhook_configs, strict=True):
            sandbox.kubectl("delete", kind, name, "--ignore-not-found", check=False)


def stop(sandbox: Sandbox) -> None:
    """Stop the manager and take its webhooks out (they would refuse every batch Job)."""
    stop_manager(sandbox, pidfile(sandbox), _WEBHOOK_CONFIGS)


def flat_kubeconfig(sandbox: Sandbox) -> str:
    """SANDBOX's kubeconfig with its certificates inline: MultiKueue refuses one that points
    to files."""
    return sandbox.kubectl("config", "view", "--flatten", "--minify", "--raw").stdout


def wiring(workers: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """What the manager needs to dispatch to WORKERS ((name, flat kubeconfig) each): a
    Secret and a MultiKueueCluster each; a MultiKueueConfig and an AdmissionCheck for each
    worker alone (a region: a queue naming it sends there) and ALL_WORKERS for all of them
    (the first to admit runs it)."""
    api = "kueue.x-k8s.io/v1beta2"
    items: list[dict[str, Any]] = []

    def check(name: str, clusters: list[str]) -> None:
        items.append({"apiVersion": api, "kind": "MultiKueueConfig",
                      "metadata": {"name": name}, "spec": {"clusters": clusters}})
        items.append({"apiVersion": api, "kind": "AdmissionCheck", "metadata": {"name": name},
                      "spec": {"controllerName": MULTIKUEUE, "parameters": {
                          "apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig",
                          "name": name}}})

    for name, kubeconfig in workers:
        secret = f"{name}-kubeconfig"
        items.append({"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": secret, "namespace": NAMESPACE},
                      "stringData": {"kubeconfig": kubeconfig}})
        items.append({"apiVersion": api, "kind": "MultiKueueCluster",
                      "metadata": {"name": name},
                      "spec": {"clusterSource": {"kubeConfig": {
                          "locationType": "Secret", "location": secret}}}})
        check(name, [name])
    check(ALL_WORKERS, [name for name, _ in workers])
    return items


def connect(manager: Sandbox, workers: list[Sandbox], timeout: float = 90,
            progress: Progress = build.print_progress) -> None:
    """Wire MultiKueue from MANAGER to WORKERS (each running Kueue) and wait until the
    manager reaches every one (MultiKueueCluster Active)."""
    for box in (manager, *workers):
        require_running(box)
        if not running(box):
            raise SandboxError(f"sandbox {box.name!r} runs no Kueue: start it with "
                               f"`goodput sandbox up --kueue --name {box.name}`")
        if box.kubectl("get", "crd", "trainingjobs.goodput.dev", check=False).returncode:
            raise SandboxError(f"sandbox {box.name!r} lacks the operator's CRDs, which "
                               "MultiKueue needs on every cluster: kubectl apply -f crds/ "
                               "(or install the Helm chart) there first")
    if manager.name in {w.name for w in workers}:
        raise SandboxError("a sandbox cannot be its own worker")
    items = wiring([(w.name, flat_kubeconfig(w)) for w in workers])
    manager.kubectl("apply", "-f", "-", input_text=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": items}))
    deadline = time.monotonic() + timeout
    for worker in workers:
        while True:
            found = manager.kubectl("get", "multikueuecluster", worker.name, "-o", "json",
                                    check=False)
            conditions = (json.loads(found.stdout or "{}").get("status") or {}).get(
                "conditions") or []
            active = next((c for c in conditions if c.get("type") == "Active"), None)
            if active is not None and active.get("status") == "True":
                break
            if time.monotonic() > deadline:
                said = f": {active.get('reason')}: {active.get('message')}" if active else ""
                raise SandboxError(f"MultiKueueCluster {worker.name} is not Active after "
                                   f"{timeout:.0f}s{said}")
            time.sleep(0.5)
    progress(f"MultiKueue: {manager.name} dispatches to {', '.join(w.name for w in workers)}"
             f" (AdmissionChecks: {ALL_WORKERS} for any of them; "
             f"{', '.join(w.name for w in workers)} for one).")
