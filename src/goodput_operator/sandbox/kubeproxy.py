"""kube-proxy for a sandbox's real nodes: ClusterIP Services route as on a real cluster.

One kube-proxy per host (iptables mode; its chains are host-wide), built from the Kubernetes
module with the control plane and started with the first real node. All real nodes share
the host's network namespace for routing, so one proxy serves them all: a pod's packet to a
ClusterIP leaves its bridge for the host, where KUBE-SERVICES rewrites it to an endpoint
(another pod, or the API server's host address for the `kubernetes` Service). The flags leave
the host's conntrack limits and localhost alone (shared/design/REAL-NODES.md, "kube-proxy");
its rules are removed with ``kube-proxy --cleanup`` when the last real node goes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from goodput_operator.sandbox import build, hostnet, procs
from goodput_operator.sandbox.versions import KUBERNETES_COMPONENT

POD_CIDR = "10.244.0.0/16"  # every real node's /24 (hostnet.subnet) lies in it


def binary() -> Path:
    return build.binary_path(KUBERNETES_COMPONENT, "kube-proxy")


def command(kubeconfig: Path, node: str, metrics_port: int, healthz_port: int) -> list[str]:
    return [str(binary()), "--kubeconfig", str(kubeconfig), "--hostname-override", node,
            "--proxy-mode", "iptables", "--cluster-cidr", POD_CIDR,
            # leave the host's conntrack table and localhost routing as they are
            "--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0", "--iptables-localhost-nodeports=false",
            "--nodeport-addresses=primary", "--oom-score-adj=0",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            f"--healthz-bind-address=127.0.0.1:{healthz_port}", "-v", "1"]


def start(sandbox: str, folder: Path, kubeconfig: Path, node: str,
          progress: build.Progress) -> bool:
    """Start the sandbox's kube-proxy (following NODE, a Ready real node) unless it runs;
    False when another sandbox on this host already has the host's one kube-proxy."""
    pidfile = folder / "kube-proxy.pid"
    if procs.alive(pidfile):
        return True
    holder = hostnet.claim_proxy(sandbox, pidfile)
    if holder:
        progress(f"  kube-proxy: sandbox {holder!r} runs this host's kube-proxy; Services of "
                 f"{sandbox!r} will not route until it is down")
        return False
    procs.spawn(command(kubeconfig, node, procs.free_port(), procs.free_port()),
                folder / "kube-proxy.log", pidfile)
    return True


def stop(sandbox: str, folder: Path) -> None:
    """Stop the sandbox's kube-proxy and, if the host's kube-proxy was this sandbox's,
    remove its rules (a sandbox that never got it must not remove another's)."""
    procs.kill_pidfile(folder / "kube-proxy.pid")
    if hostnet.release_proxy(sandbox):
        subprocess.run([str(binary()), "--cleanup"], capture_output=True, check=False,
                       timeout=60)
