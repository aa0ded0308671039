"""The host-side plumbing of real sandbox nodes: slots, bridges, cgroups, sysctls, mounts.

Everything here changes the host, so everything here has its undo beside it, and
`goodput sandbox down` leaves the machine as it found it. Slots are host-wide (two
sandboxes with real nodes get different subnets, bridges and cgroup roots) and are kept in
one JSON file under a lock; the sysctls the kubelet and the bridge plugin change are saved
when the first real node on the host starts and restored when the last one stops.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from goodput_operator.sandbox import build, procs

CGROUP_V1 = Path("/sys/fs/cgroup")
# changed by the kubelet (the first three) and the CNI bridge plugin (ip_forward)
SYSCTLS = ("kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory",
           "net/ipv4/ip_forward")
MAX_SLOTS = 250
# host folders real nodes create: the kubelet's hard-coded device-plugins folder, and the
# folder all real nodes share (sandbox checkpoints); removed with the last real node if
# they were not there before the first
HOST_FOLDERS = ("/var/lib/kubelet", "/var/lib/goodput-sandbox")
# iptables chains the kubelets make (canaries, a localnet firewall, a mode hint) and
# `kube-proxy --cleanup` leaves: removed with the last real node if they were not there before
KUBELET_CHAINS = tuple((tool, table, chain) for tool in ("iptables", "ip6tables")
                       for table, chain in (("filter", "KUBE-FIREWALL"),
                                            ("filter", "KUBE-KUBELET-CANARY"),
                                            ("nat", "KUBE-KUBELET-CANARY"),
                                            ("mangle", "KUBE-KUBELET-CANARY"),
                                            ("mangle", "KUBE-IPTABLES-HINT")))


class HostError(RuntimeError):
    """The host cannot run real nodes (no root, no overlayfs, a tool missing)."""


def state_file() -> Path:
    return build.cache_root() / "real-nodes-host.json"


@contextmanager
def _host_state() -> Iterator[dict[str, object]]:
    """The host-wide record (slots in use, saved sysctls), read and written under a lock."""
    with build._locked(build.cache_root() / "locks" / "real-nodes-host.lock"):
        path = state_file()
        state: dict[str, object] = json.loads(path.read_text()) if path.is_file() else {}
        state.setdefault("slots", {})
        yield state
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(state, indent=1, sort_keys=True))


def unavailable_reason() -> str | None:
    """Why real nodes cannot run on this machine, or None when they can."""
    if os.geteuid() != 0:
        return "real nodes need root (they run kubelets, containerd and CNI bridges)"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "real nodes need overlayfs (containerd's snapshotter); this kernel has none"
    missing = [tool for tool in ("containerd", "ctr", "runc", "ip", "debootstrap")
               if not _which(tool)]
    if not Path("/usr/lib/cni/bridge").is_file():
        missing.append("containernetworking-plugins")
    if missing:
        return (f"missing {', '.join(missing)}: run scripts/install-real-node-deps.sh "
                "(Debian packages containerd, runc, containernetworking-plugins, debootstrap)")
    return None


def _which(tool: str) -> bool:
    return any(Path(d, tool).is_file() for d in
               (os.environ.get("PATH", "") + ":/usr/sbin:/sbin").split(":") if d)


def claim_slot(owner: str) -> int:
    """A host-wide slot for one real node: it picks the node's subnet and bridge."""
    with _host_state() as state:
        slots: dict[str, str] = state["slots"]  # type: ignore[assignment]
        if not slots:
            state["sysctls"] = {key: read_sysctl(key) for key in SYSCTLS}
            state["created"] = [f for f in HOST_FOLDERS if not Path(f).exists()]
            state["chains"] = [list(c) for c in KUBELET_CHAINS if not chain_exists(*c)]
        for slot in range(MAX_SLOTS):
            if str(slot) not in slots:
                slots[str(slot)] = owner
                return slot
    raise HostError(f"all {MAX_SLOTS} real-node slots of this host are taken")


def release_slot(slot: int) -> None:
    """Free SLOT; the last slot freed restores the sysctls saved by the first claim."""
    with _host_state() as state:
        slots: dict[str, str] = state["slots"]  # type: ignore[assignment]
        slots.pop(str(slot), None)
        saved: dict[str, str] = state.get("sysctls") or {}  # type: ignore[assignment]
        if not slots and saved:
            for key, value in saved.items():
                write_sysctl(key, value)
            state.pop("sysctls", None)
        created: list[str] = state.get("created") or []  # type: ignore[assignment]
        if not slots:
            for folder in created:
                subprocess.run(["rm", "-rf", "--one-file-system", folder], check=False)
            state.pop("created", None)
            chains: list[list[str]] = state.pop("chains", None) or []  # type: ignore[assignment]
            for tool, table, chain in chains:
                delete_chain(tool, table, chain)


def held_sysctls() -> dict[str, str]:
    """While real nodes run on this host: the SYSCTLS as they were before the first one
    started (release_slot puts them back after the last); else nothing."""
    with _host_state() as state:
        saved: dict[str, str] = state.get("sysctls") or {}  # type: ignore[assignment]
        return dict(saved) if state["slots"] else {}


def claim_proxy(owner: str, pidfile: Path) -> str | None:
    """Make OWNER (a sandbox) the host's one kube-proxy (PIDFILE: its process): its iptables
    chains are host-wide, so a second sandbox's would fight the first's. Returns the sandbox
    whose kube-proxy runs already, or None once OWNER holds it."""
    with _host_state() as state:
        holder = _live_proxy(state)
        if holder and holder != owner:
            return holder
        state["proxy"] = {"owner": owner, "pidfile": str(pidfile)}
        return None


def proxy_holder() -> str | None:
    """The sandbox whose kube-proxy runs on this host, if any (a holder that died without
    `sandbox down` no longer counts)."""
    with _host_state() as state:
        return _live_proxy(state)


def _live_proxy(state: dict[str, object]) -> str | None:
    record = state.get("proxy")
    if not isinstance(record, dict) or not procs.alive(Path(str(record.get("pidfile")))):
        state.pop("proxy", None)
        return None
    return str(record["owner"])


def release_proxy(owner: str) -> bool:
    """Give the host's kube-proxy up; True if OWNER held it (its rules are OWNER's to
    remove, never another sandbox's)."""
    with _host_state() as state:
        record = state.get("proxy")
        if isinstance(record, dict) and record.get("owner") == owner:
            state.pop("proxy")
            return True
        return False


def chain_exists(tool: str, table: str, chain: str) -> bool:
    return subprocess.run([tool, "-t", table, "-S", chain], capture_output=True,
                          check=False).returncode == 0


def delete_chain(tool: str, table: str, chain: str) -> None:
    """Remove CHAIN and every jump to it from the other chains of TABLE (a rule quoted as
    `iptables -S` prints it: comments with spaces are one word)."""
    rules = subprocess.run([tool, "-t", table, "-S"], capture_output=True, text=True,
                           check=False).stdout.splitlines()
    for rule in rules:
        words = shlex.split(rule)
        if words[:1] == ["-A"] and words[1] != chain and f" -j {chain} " in f"{rule} ":
            subprocess.run([tool, "-t", table, "-D", *words[1:]], capture_output=True,
                           check=False)
    subprocess.run([tool, "-t", table, "-F", chain], capture_output=True, check=False)
    subprocess.run([tool, "-t", table, "-X", chain], capture_output=True, check=False)


def read_sysctl(key: str) -> str:
    return Path("/proc/sys", key).read_text().strip()


def write_sysctl(key: str, value: str) -> None:
    with contextlib.suppress(OSError):
        Path("/proc/sys", key).write_text(value)


def host_ip() -> str:
    """The machine's own interface address: nodes' InternalIP, where pods reach the host."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                         capture_output=True, text=True, check=False).stdout
    # `2: eth0    inet 192.0.2.2/24 ...`; our own pod bridges (gpbrN) are not the host's
    found: list[str] = [address for interface, address in
             re.findall(r"^\d+:\s+(\S+)\s+inet (\d+\.\d+\.\d+\.\d+)/", out, re.MULTILINE)
             if not interface.startswith("gpbr")]
    if not found:
        raise HostError("no IPv4 interface address besides loopback: real nodes need one")
    return found[0]


def subnet(slot: int) -> str:
    return f"10.244.{slot}.0/24"


def gateway(slot: int) -> str:
    return f"10.244.{slot}.1"


def bridge(slot: int) -> str:
    return f"gpbr{slot}"


def ensure_bridge(slot: int) -> None:
    """The node's pod bridge, made before any pod so its address can serve cluster DNS."""
    name = bridge(slot)
    if subprocess.run(["ip", "link", "show", name], capture_output=True,
                      check=False).returncode != 0:
        _ip("link", "add", name, "type", "bridge")
    _ip("addr", "replace", f"{gateway(slot)}/24", "dev", name)
    _ip("link", "set", name, "up")


def delete_bridge(slot: int) -> None:
    subprocess.run(["ip", "link", "del", bridge(slot)], capture_output=True, check=False)


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise HostError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")


def v1_hierarchies() -> list[Path]:
    """Every cgroup v1 hierarchy (name=systemd included; the v2 `unified` one skipped)."""
    if not CGROUP_V1.is_dir():
        return []
    return [p for p in sorted(CGROUP_V1.iterdir())
            if p.is_dir() and not p.is_symlink() and p.name != "unified"
            and (p / "cgroup.procs").is_file()]


def ensure_cgroup(root: str) -> None:
    """The kubelet's cgroupRoot must exist in every hierarchy before it starts."""
    for hierarchy in v1_hierarchies():
        target = hierarchy / root.strip("/")
        target.mkdir(exist_ok=True)
        if hierarchy.name == "cpuset":
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if not (target / knob).read_text().strip():
                    (target / knob).write_text((hierarchy / knob).read_text())


def cgroup_pids(root: str) -> set[int]:
    """Every process under ROOT (the node's containers and pause processes)."""
    pids: set[int] = set()
    for hierarchy in v1_hierarchies()[:1]:  # a process is in every hierarchy: one suffices
        for listing in (hierarchy / root.strip("/")).rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in listing.read_text().split())
    return pids


def remove_cgroup(root: str) -> None:
    """rmdir ROOT and everything under it, deepest first, in every hierarchy."""
    for hierarchy in v1_hierarchies():
        top = hierarchy / root.strip("/")
        if not top.is_dir():
            continue
        for folder in sorted((p for p in top.rglob("*") if p.is_dir()),
                             key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                folder.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def mounts_under(folder: Path) -> list[str]:
    """Mount points at or below FOLDER, deepest first (unmount order)."""
    prefix = str(folder.resolve())
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def unmount_all(folder: Path) -> None:
    for point in mounts_under(folder):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def unused_netns() -> list[Path]:
    """CNI network namespaces (/run/netns/cni-*) no process is in any more: what a stopped
    containerd leaves behind. A namespace of a live pod (any containerd's) is kept."""
    netns = Path("/run/netns")
    if not netns.is_dir():
        return []
    in_use: set[int] = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                in_use.add(os.stat(proc / "ns" / "net").st_ino)
    leftovers = []
    for entry in netns.glob("cni-*"):
        with contextlib.suppress(OSError):
            if os.stat(entry).st_ino not in in_use:
                leftovers.append(entry)
    return leftovers


def remove_netns(paths: list[Path]) -> None:
    for path in paths:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
        with contextlib.suppress(OSError):
            path.unlink()
