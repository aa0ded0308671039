"""JobSet beside a sandbox: a peer for the head-to-head benchmarks (bench/launch.py), never
part of `make test`'s critical path.

JobSet's controller manager runs as a plain process against the sandbox's API server, built
from its Go module like Kueue (sandbox/kueue.py, cached). What a Deployment would get from
its manifests is done here instead, as for Kueue:
- its webhooks (JobSet's defaulting and validation, and its pod webhooks) are served on
  127.0.0.1 with a certificate of a CA made for the sandbox and registered by `url` +
  `caBundle`; the pod webhooks keep the object selector JobSet's own kustomize patch gives
  them (pods of a JobSet only), so no other pod of the sandbox goes through them;
- its internal certificate management is off (it would write a Secret for a Service that
  does not exist); the metrics server reads the same certificate.
Its configuration otherwise is JobSet's default.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import yaml

from goodput_operator.sandbox import build, kueue, procs
from goodput_operator.sandbox.build import Progress
from goodput_operator.sandbox.cluster import Sandbox
from goodput_operator.sandbox.versions import JOBSET_COMPONENT

NAMESPACE = "jobset-system"
_WEBHOOK_CONFIGS = ("goodput-jobset-mutating", "goodput-jobset-validating")
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"  # the label on every pod of a JobSet


def home(sandbox: Sandbox) -> Path:
    return sandbox.home / "jobset"


def pidfile(sandbox: Sandbox) -> Path:
    return home(sandbox) / "jobset.pid"


def running(sandbox: Sandbox) -> bool:
    return procs.alive(pidfile(sandbox))


def configuration(ports: dict[str, int], certs: Path) -> dict[str, Any]:
    """JobSet's Configuration for this sandbox: one manager on 127.0.0.1, no leader
    election, certificates from CERTS (its metrics server's too)."""
    config = manager_configuration("config.jobset.x-k8s.io/v1alpha1", ports, certs)
    config["metrics"]["certDir"] = str(certs)
    return config


def manager_configuration(api_version: str, ports: dict[str, int], certs: Path
                          ) -> dict[str, Any]:
    """A kubebuilder project's controller-manager Configuration of API_VERSION (JobSet's
    here, LeaderWorkerSet's in sandbox/lws.py): health, metrics and webhooks on 127.0.0.1 at
    PORTS, the webhook certificate from CERTS, no leader election, its own certificate
    management off (it would write a Secret for a Service that does not exist)."""
    return {
        "apiVersion": api_version,
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['metrics']}"},
        "webhook": {"host": "127.0.0.1", "port": ports["webhook"], "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    }


def webhook_configurations(manifests: str, port: int, ca: bytes) -> list[dict[str, Any]]:
    """JobSet's webhook configurations pointed at 127.0.0.1:PORT by url and CA; the pod
    webhooks only for a JobSet's pods (what JobSet's kustomize patches say)."""
    return url_webhooks(manifests, port, ca, _WEBHOOK_CONFIGS, JOBSET_NAME)


def url_webhooks(manifests: str, port: int, ca: bytes, config_names: tuple[str, str],
                 pod_label: str) -> list[dict[str, Any]]:
    """A kubebuilder project's webhook configurations (MANIFESTS: mutating, then
    validating), renamed CONFIG_NAMES, pointed at 127.0.0.1:PORT by url and CA; their pod
    webhooks only for pods that carry POD_LABEL, as the projects' own kustomize patches
    say (JobSet here, LeaderWorkerSet in sandbox/lws.py), so no other pod of the sandbox
    goes through them."""
    bundle = base64.b64encode(ca).decode()
    found = []
    for doc, name in zip(yaml.safe_load_all(manifests), config_names, strict=True):
        hooks = []
        for hook in doc.get("webhooks") or []:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
            if any("pods" in (rule.get("resources") or []) for rule in hook.get("rules") or []):
                hook["objectSelector"] = {"matchExpressions": [
                    {"key": pod_label, "operator": "Exists"}]}
            hooks.append(hook)
        found.append({**doc, "metadata": {"name": name}, "webhooks": hooks})
    return found


def start(sandbox: Sandbox, progress: Progress = build.print_progress) -> None:
    """Build JobSet (first time), install its CRDs and webhooks and run its manager for
    SANDBOX; ready when this returns."""
    here = home(sandbox)
    peer = kueue.prepare(sandbox, JOBSET_COMPONENT, "JobSet", NAMESPACE, here,
                         pidfile(sandbox), progress)
    config = here / "config.yaml"
    config.write_text(yaml.safe_dump(configuration(peer.ports, here / "certs")))
    hooks = webhook_configurations(peer.webhook_manifests(), peer.ports["webhook"], peer.ca)
    sandbox.apply(*hooks)
    kueue.run_manager(sandbox, "JobSet", [str(peer.binaries / "jobset"), f"--config={config}",
                                          "--zap-log-level=2"],
                      here / "jobset.log", pidfile(sandbox), peer.ports["health"])
    progress(f"JobSet is up in {time.monotonic() - peer.started:.0f}s "
             f"(log: {here / 'jobset.log'}).")


def stop(sandbox: Sandbox) -> None:
    """Stop the manager and take its webhooks out (they would refuse every JobSet's pod)."""
    kueue.stop_manager(sandbox, pidfile(sandbox), _WEBHOOK_CONFIGS)
