"""Real nodes beside the simulated fleet: a kubelet and a containerd per node, real pods.

A real node stands in for one node of the fleet: same name, labels and accelerator
capacity (patched into its status, as a device plugin would report it), so the operator
cannot tell it from the simulated ones except that containers really run. Each node has
its own containerd (socket, root, state, runc root), kubelet (ports, root and cert dirs,
cgroup root, pod logs), CNI bridge and /24 (10.244.<slot>.0/24, no NAT between nodes).
One CoreDNS per sandbox serves cluster DNS on every node's bridge address, so pods resolve
`w0.<job>.<ns>.svc` exactly as on a real cluster. See shared/design/REAL-NODES.md for the
recipe and the traps (oom_score_adj, kwok taking over nodes, logs through InternalIP).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from goodput_operator.sandbox import (
    build,
    hostnet,
    images,
    kubeproxy,
    operator_image,
    procs,
    seed,
)
from goodput_operator.sandbox.versions import COREDNS_COMPONENT, KUBERNETES_COMPONENT

REAL_LABEL = "sandbox.goodput.dev/real-node"  # the sandbox's mark; the operator ignores it
SYSTEM_LABEL = "sandbox.goodput.dev/system-node"  # a real node for cluster services
SHARED_DIR = Path("/var/lib/goodput-sandbox/shared")  # stands in for FSx/S3: all nodes see it
STANDARD = ("cpu", "memory", "pods", "ephemeral-storage")  # the kubelet reports these itself
UNIX_PATH_MAX = 107  # sun_path is 108 bytes, the last one NUL
Progress = Callable[[str], None]


class RealNodeError(RuntimeError):
    """A real node failed to start or stop; the message names the log to read."""


@dataclass(frozen=True)
class RealNode:
    """One real node of a sandbox, as recorded in ``<sandbox>/real/nodes.json``."""

    sandbox: str
    name: str
    slot: int
    kubelet_port: int
    healthz_port: int
    home: str
    labels: dict[str, str]
    extended: dict[str, str]  # accelerator capacity patched into the node's status

    @property
    def dir(self) -> Path:
        return Path(self.home)

    @property
    def socket(self) -> Path:
        return self.dir / "containerd.sock"

    @property
    def is_system(self) -> bool:
        """A node for cluster services (the operator), not a stand-in for a fleet node."""
        return self.labels.get(SYSTEM_LABEL) == "true"

    @property
    def cgroup_root(self) -> str:
        return f"/goodput-{self.sandbox}-{self.name}"

    def ctr(self) -> list[str]:
        return ["ctr", "--address", str(self.socket)]


def nodes_file(sandbox_home: Path) -> Path:
    return sandbox_home / "real" / "nodes.json"


def load(sandbox_home: Path) -> list[RealNode]:
    path = nodes_file(sandbox_home)
    if not path.is_file():
        return []
    return [RealNode(**item) for item in json.loads(path.read_text())]


def _save(sandbox_home: Path, nodes: Sequence[RealNode]) -> None:
    path = nodes_file(sandbox_home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(n) for n in nodes], indent=1))


def find(sandbox_home: Path, name: str) -> RealNode | None:
    return next((n for n in load(sandbox_home) if n.name == name), None)


def stand_in(fleet_node: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, extended capacity) a real node copies from the fleet node it replaces."""
    labels = {k: v for k, v in fleet_node["metadata"]["labels"].items() if k != "type"}
    labels[REAL_LABEL] = "true"
    capacity = fleet_node.get("status", {}).get("capacity", {})
    return labels, {k: str(v) for k, v in capacity.items() if k not in STANDARD}


def path_too_long(sandbox_home: Path, name: str) -> str | None:
    """Why node NAME cannot run under SANDBOX_HOME (a kubelet socket path would exceed what
    a unix socket may have), or None."""
    home = sandbox_home / "real" / name
    longest = home / "kubelet" / "pod-resources" / "1234567890"  # the kubelet's own socket
    if len(str(longest)) <= UNIX_PATH_MAX:
        return None
    return (f"{name}: the kubelet's sockets under {home} would be longer than the "
            f"{UNIX_PATH_MAX} bytes a unix socket path may have; use a shorter sandbox name "
            "or node name, or a shorter GOODPUT_CACHE")


def containerd_config(node: RealNode) -> str:
    home = node.dir
    cri = {
        "sandbox_image": images.PAUSE_IMAGE,
        # root here lacks CAP_SYS_RESOURCE: nothing may lower oom_score_adj (REAL-NODES trap 1)
        "restrict_oom_score_adj": True,
        "containerd": {"snapshotter": "overlayfs", "default_runtime_name": "runc",
                       "runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2",
                                             "options": {"Root": str(home / "runc")}}}},
        "cni": {"bin_dir": "/usr/lib/cni", "conf_dir": str(home / "cni")},
    }
    config = {
        "version": 2, "root": str(home / "containerd" / "root"),
        "state": str(home / "containerd" / "state"),
        "grpc": {"address": str(node.socket)},
        "disabled_plugins": ["io.containerd.snapshotter.v1.aufs",
                             "io.containerd.snapshotter.v1.btrfs",
                             "io.containerd.snapshotter.v1.zfs",
                             "io.containerd.snapshotter.v1.devmapper"],
        "plugins": {"io.containerd.grpc.v1.cri": cri,
                    "io.containerd.internal.v1.opt": {"path": str(home / "opt")}},
    }
    return _toml(config)


def _toml(table: dict[str, Any], prefix: str = "") -> str:
    """Enough TOML for containerd's config: scalars, lists of strings, nested tables."""
    lines: list[str] = []
    nested: list[tuple[str, dict[str, Any]]] = []
    for key, value in table.items():
        if isinstance(value, dict):
            nested.append((key, value))
        else:
            lines.append(f"{key} = {json.dumps(value)}")
    text = "\n".join(lines) + ("\n" if lines else "")
    for key, value in nested:
        name = f"{prefix}.{json.dumps(key)}" if prefix else json.dumps(key)
        text += f"\n[{name}]\n" + _toml(value, name)
    return text


def cni_config(node: RealNode) -> dict[str, Any]:
    """One bridge and one /24 per node, gateway on the bridge, no NAT: pods see each other's
    real addresses across nodes with no extra routes (all bridges live on the host)."""
    return {"cniVersion": "0.4.0", "name": f"goodput-{node.slot}", "plugins": [{
        # the default route through the bridge: other nodes' /24s are reached via the host
        "type": "bridge", "bridge": hostnet.bridge(node.slot), "isGateway": True,
        "isDefaultGateway": True,
        "ipMasq": False, "hairpinMode": True,
        "ipam": {"type": "host-local", "dataDir": str(node.dir / "cni-ipam"),
                 "ranges": [[{"subnet": hostnet.subnet(node.slot),
                              "gateway": hostnet.gateway(node.slot)}]]}}]}


def corefile(binds: Sequence[str], kubeconfig: Path) -> str:
    """Cluster DNS for the sandbox's pods, answering on each bridge address in BINDS. Every
    directive here must be a plugin in versions.COREDNS_PLUGINS, or CoreDNS will not start."""
    return (f".:53 {{\n  bind {' '.join(binds)}\n  errors\n"
            f"  kubernetes cluster.local in-addr.arpa ip6.arpa {{\n"
            f"    kubeconfig {kubeconfig}\n    pods insecure\n"
            f"    fallthrough in-addr.arpa ip6.arpa\n  }}\n  cache 5\n}}\n")


def kubelet_config(node: RealNode) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupRoot": node.cgroup_root,
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "port": node.kubelet_port, "healthzPort": node.healthz_port,
        "healthzBindAddress": "127.0.0.1", "readOnlyPort": 0,
        # the API server fetches logs and runs exec through the kubelet: on a single-machine
        # test rig anonymous access with AlwaysAllow is acceptable, and nowhere else
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "oomScoreAdj": 0, "failSwapOn": False, "podLogsDir": str(node.dir / "pod-logs"),
        # imported images cannot be pulled again: never collect them
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "maxPods": 20, "clusterDomain": "cluster.local",
        "clusterDNS": [hostnet.gateway(node.slot)], "resolvConf": "",
        "serializeImagePulls": False,
    }


class Runtime:
    """Starts, stops and cleans up the real nodes of one sandbox."""

    def __init__(self, sandbox_name: str, sandbox_home: Path, kubeconfig: Path,
                 kubectl: Callable[..., subprocess.CompletedProcess[str]],
                 progress: Progress = build.print_progress) -> None:
        self.sandbox_name = sandbox_name
        self.home = sandbox_home
        self.kubeconfig = kubeconfig
        self.kubectl = kubectl
        self.progress = progress

    # ---- whole nodes -------------------------------------------------------------------

    def add(self, fleet_node: dict[str, Any]) -> RealNode:
        """Start a real node standing in for FLEET_NODE; return once it is Ready."""
        reason = hostnet.unavailable_reason()
        if reason:
            raise RealNodeError(reason)
        name = fleet_node["metadata"]["name"]
        if find(self.home, name):
            raise RealNodeError(f"{name} is already a real node of sandbox "
                                f"{self.sandbox_name!r}")
        problem = path_too_long(self.home, name)
        if problem:
            raise RealNodeError(problem)
        home = self.home / "real" / name
        started = time.monotonic()
        labels, extended = stand_in(fleet_node)
        slot = hostnet.claim_slot(f"{self.sandbox_name}/{name}")
        node = RealNode(self.sandbox_name, name, slot, procs.free_port(), procs.free_port(),
                        str(home), labels, extended)
        _save(self.home, [*load(self.home), node])
        node.dir.mkdir(parents=True, exist_ok=True)
        SHARED_DIR.mkdir(parents=True, exist_ok=True)
        SHARED_DIR.chmod(0o1777)
        hostnet.ensure_bridge(slot)
        hostnet.ensure_cgroup(node.cgroup_root)
        (node.dir / "cni").mkdir(exist_ok=True)
        (node.dir / "cni" / "10-goodput.conflist").write_text(json.dumps(cni_config(node)))
        (node.dir / "containerd.toml").write_text(containerd_config(node))
        everywhere = images.ensure_images(self.progress)
        root = node.dir / "containerd" / "root"  # containerd_config's root
        planted = not root.exists() and seed.plant(seed.seed_root(everywhere, self.progress),
                                                     root)
        self._start_containerd(node)
        # the operator's image goes where the operator runs (tags saved by `make image`)
        system = operator_image.saved() if node.is_system else []
        for image in [*([] if planted else everywhere), *system]:
            images.import_image(node.ctr(), image)
        (node.dir / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(node)))
        self.restart_dns()
        self.start_kubelet(node)
        self._adopt(node)
        kubeproxy.start(self.sandbox_name, self.home / "real", self.kubeconfig, name,
                        self.progress)
        self.progress(f"Real node {name} is Ready ({time.monotonic() - started:.1f}s; "
                      f"pods on {hostnet.subnet(slot)})")
        return node

    def _start_containerd(self, node: RealNode) -> None:
        procs.start_containerd(node.dir / "containerd.toml", node.socket,
                               node.dir / "containerd.log", node.dir / "containerd.pid")

    def start_kubelet(self, node: RealNode) -> None:
        kubelet = build.binary_path(KUBERNETES_COMPONENT, "kubelet")
        procs.spawn([str(kubelet), "--config", str(node.dir / "kubelet.yaml"),
                     "--kubeconfig", str(self.kubeconfig), "--root-dir",
                     str(node.dir / "kubelet"), "--cert-dir", str(node.dir / "pki"),
                     "--hostname-override", node.name, "--node-ip", hostnet.host_ip(),
                     "-v", "1"],
                    node.dir / "kubelet.log", node.dir / "kubelet.pid")

    def stop_kubelet(self, node: RealNode) -> None:
        """A partition: the kubelet is gone, its containers keep running."""
        procs.kill_pidfile(node.dir / "kubelet.pid", signal.SIGTERM)

    def kubelet_running(self, node: RealNode) -> bool:
        return procs.alive(node.dir / "kubelet.pid")

    def crash(self, node: RealNode) -> int:
        """Kill every container process of NODE (as a kernel panic would); return how many."""
        pids = hostnet.cgroup_pids(node.cgroup_root)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)

    def _adopt(self, node: RealNode) -> None:
        """Label the registered node like its fleet twin and give it accelerators."""
        procs.wait(lambda: self.kubectl("get", "node", node.name, check=False).returncode == 0,
                   60, f"node {node.name} to register (log {node.dir / 'kubelet.log'})")
        self.kubectl("label", "node", node.name, "--overwrite",
                     *(f"{k}={v}" for k, v in node.labels.items()))
        if node.extended:
            patch = {"status": {"capacity": node.extended, "allocatable": node.extended}}
            self.kubectl("patch", "node", node.name, "--subresource=status", "--type=merge",
                         "-p", json.dumps(patch))
        self.kubectl("wait", "node", node.name, "--for=condition=Ready", "--timeout=60s",
                     timeout=90)

    def remove(self, node: RealNode, drain: bool = True) -> None:
        """Stop NODE and undo everything it did to the host."""
        if drain and self.kubelet_running(node):
            self._drain(node)
        self.stop_kubelet(node)
        for pid in hostnet.cgroup_pids(node.cgroup_root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in _shims_of(node):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        procs.kill_pidfile(node.dir / "containerd.pid", signal.SIGTERM)
        hostnet.unmount_all(node.dir)
        hostnet.remove_netns(hostnet.unused_netns())
        hostnet.remove_cgroup(node.cgroup_root)
        hostnet.delete_bridge(node.slot)
        _rmtree(node.dir)
        _save(self.home, [n for n in load(self.home) if n.name != node.name])
        hostnet.release_slot(node.slot)

    def _drain(self, node: RealNode) -> None:
        """Delete the node's pods and give the kubelet a moment to tear their sandboxes
        down (CNI DEL, unmounts) before everything is stopped by force."""
        self.kubectl("delete", "pods", "-A", "--field-selector", f"spec.nodeName={node.name}",
                     "--grace-period=1", "--wait=false", check=False)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            out = subprocess.run([*node.ctr(), "-n", "k8s.io", "tasks", "ls", "-q"],
                                 capture_output=True, text=True, check=False).stdout
            if not out.strip():
                return
            time.sleep(0.5)

    def remove_all(self, drain: bool = True) -> None:
        for node in load(self.home):
            self.remove(node, drain)
        self.stop_dns()
        kubeproxy.stop(self.sandbox_name, self.home / "real")

    # ---- cluster DNS -------------------------------------------------------------------

    def restart_dns(self) -> None:
        """One CoreDNS for the sandbox, answering on every real node's bridge address."""
        self.stop_dns()
        nodes = load(self.home)
        if not nodes:
            return
        coredns = build.build(COREDNS_COMPONENT, self.progress) / "coredns"
        folder = self.home / "real"
        binds = [hostnet.gateway(n.slot) for n in nodes]
        (folder / "Corefile").write_text(corefile(binds, self.kubeconfig))
        procs.spawn([str(coredns), "-conf", str(folder / "Corefile")], folder / "coredns.log",
                    folder / "coredns.pid")
        time.sleep(0.2)
        if not procs.alive(folder / "coredns.pid"):
            raise RealNodeError(f"CoreDNS exited: see {folder / 'coredns.log'}")

    def stop_dns(self) -> None:
        procs.kill_pidfile(self.home / "real" / "coredns.pid", signal.SIGTERM)


def _shims_of(node: RealNode) -> list[int]:
    """containerd-shim processes started by NODE's containerd (they outlive it)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if argv and b"containerd-shim" in argv[0] and str(node.socket).encode() in argv:
                found.append(int(proc.name))
    return found


def _rmtree(folder: Path) -> None:
    subprocess.run(["rm", "-rf", "--one-file-system", str(folder)], capture_output=True,
                   check=False)
