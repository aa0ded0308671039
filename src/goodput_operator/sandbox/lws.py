"""LeaderWorkerSet beside a sandbox: a peer for the multi-node autoscaling head-to-head
(bench/autoscaling_peers.py --group-nodes), never part of `make test`'s critical path.

LWS's controller manager runs as a plain process against the sandbox's API server, built
from its Go module like JobSet (sandbox/jobset.py, cached), with what a Deployment would get
from its manifests done here instead:
- its webhooks (LeaderWorkerSet defaulting and validation, and the pod webhooks that give
  each pod its group index and its leader's address; PEERS.md: required) are served on
  127.0.0.1 with a certificate of a CA made for the sandbox, registered by `url` +
  `caBundle`; the pod webhooks keep the object selector LWS's own kustomize patch gives
  them (pods of a LeaderWorkerSet only);
- its internal certificate management is off (it would write a Secret for a Service that
  does not exist); its metrics server makes its own certificate, as controller-runtime does.
Its configuration otherwise is LWS's default (no gang scheduling provider).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from goodput_operator.sandbox import build, jobset, kueue, procs
from goodput_operator.sandbox.build import Progress
from goodput_operator.sandbox.cluster import Sandbox
from goodput_operator.sandbox.versions import LWS_COMPONENT

NAMESPACE = "lws-system"
_WEBHOOK_CONFIGS = ("goodput-lws-mutating", "goodput-lws-validating")
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"  # the label on every pod of a LeaderWorkerSet
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"  # a pod's group (its replica)
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"  # 0: the group's leader
EXCLUSIVE_TOPOLOGY = "leaderworkerset.sigs.k8s.io/exclusive-topology"  # one group per domain
_LAYOUT = ("config/crd/bases", "config/webhook/manifests.yaml")


def home(sandbox: Sandbox) -> Path:
    return sandbox.home / "lws"


def pidfile(sandbox: Sandbox) -> Path:
    return home(sandbox) / "lws.pid"


def running(sandbox: Sandbox) -> bool:
    return procs.alive(pidfile(sandbox))


def configuration(ports: dict[str, int], certs: Path) -> dict[str, Any]:
    """LWS's Configuration for this sandbox: one manager on 127.0.0.1, no leader election,
    its webhook certificate from CERTS (its metrics server makes its own)."""
    return jobset.manager_configuration("config.lws.x-k8s.io/v1alpha1", ports, certs)


def webhook_configurations(manifests: str, port: int, ca: bytes) -> list[dict[str, Any]]:
    """LWS's webhook configurations pointed at 127.0.0.1:PORT by url and CA; the pod
    webhooks only for a LeaderWorkerSet's pods."""
    return jobset.url_webhooks(manifests, port, ca, _WEBHOOK_CONFIGS, LWS_NAME)


def leader_worker_set(name: str, namespace: str, replicas: int, size: int,
                      template: dict[str, Any], exclusive_key: str | None = None
                      ) -> dict[str, Any]:
    """A LeaderWorkerSet of REPLICAS groups of SIZE pods (a leader and SIZE-1 workers), each
    from the pod TEMPLATE; with EXCLUSIVE_KEY, LWS keeps each group alone inside one value
    of that node label (its 1:1 exclusive placement), else the scheduler places each pod
    where it fits."""
    annotations = {EXCLUSIVE_TOPOLOGY: exclusive_key} if exclusive_key else {}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
            "spec": {"replicas": replicas,
                     "leaderWorkerTemplate": {"size": size, "workerTemplate": template}}}


def start(sandbox: Sandbox, progress: Progress = build.print_progress) -> None:
    """Build LWS (first time), install its CRDs and webhooks and run its manager for
    SANDBOX; ready when this returns."""
    here = home(sandbox)
    peer = kueue.prepare(sandbox, LWS_COMPONENT, "LeaderWorkerSet", NAMESPACE, here,
                         pidfile(sandbox), progress, _LAYOUT)
    config = here / "config.yaml"
    config.write_text(yaml.safe_dump(configuration(peer.ports, here / "certs")))
    sandbox.apply(*webhook_configurations(peer.webhook_manifests(), peer.ports["webhook"],
                                          peer.ca))
    kueue.run_manager(sandbox, "LeaderWorkerSet",
                      [str(peer.binaries / "lws"), f"--config={config}", "--zap-log-level=2"],
                      here / "lws.log", pidfile(sandbox), peer.ports["health"])
    progress(f"LeaderWorkerSet is up in {time.monotonic() - peer.started:.0f}s "
             f"(log: {here / 'lws.log'}).")


def stop(sandbox: Sandbox) -> None:
    """Stop the manager and take its webhooks out (they would refuse every LWS's pod)."""
    kueue.stop_manager(sandbox, pidfile(sandbox), _WEBHOOK_CONFIGS)
