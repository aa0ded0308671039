"""What a kind cluster changes on the host, recorded before the first one starts and put
back when the last one is deleted (`goodput kind down` leaves the machine as found).

kind's nodes are privileged containers that share the host's kernel: their systemd applies
its sysctl.d files and their kubelets set `kernel.panic`, `vm.overcommit_memory` and the
like host-wide; netavark adds iptables chains and turns IP forwarding on; Podman's cgroupfs
manager leaves its parent cgroups; kind's Podman provider bind-mounts `/lib/modules`, which
this VM lacks (shared/design/KIND.md, traps 5 and 6). Each is saved in one record under a
lock (`<cache>/kind/host.json`) by the first cluster and undone by the last.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from goodput_operator.sandbox import build, hostnet
from goodput_operator.sandbox.cluster import SandboxError

PROC_SYS = Path("/proc/sys")
# sysctls the kernel changes on its own (counters, random values, per-boot state): never
# compared, never written back
VOLATILE = re.compile(
    r"^(kernel/random/|kernel/ns_last_pid|kernel/pty/nr|kernel/tainted|fs/dentry-state|"
    r"fs/file-nr|fs/inode-|fs/aio-nr|fs/quota/|fs/binfmt_misc/|kernel/perf_event_max_sample|"
    r"net/netfilter/nf_conntrack_count|net/ipv4/route/|net/ipv6/route/|kernel/sched_domain/|"
    r"vm/stat_refresh|kernel/usermodehelper/|kernel/seccomp/actions_avail|"
    r"net/core/netdev_rss_key|dev/)")
TABLES = ("filter", "nat", "mangle")
# what Podman and netavark make on the host, and only that: chains and cgroups of anything
# else (a sandbox's real nodes beside the cluster, say) are never touched
NETAVARK_CHAIN = re.compile(r"^NETAVARK")
PODMAN_CGROUPS = ("libpod_parent",)
MODULES = Path("/lib/modules")
# host folders a cluster makes: /lib/modules (kind mounts it), netavark's run folder
# (its IPAM database and aardvark-dns state: Podman keeps it there whatever its storage)
HOST_FOLDERS = (MODULES, Path("/run/containers"))
SLOTS = 16  # kind clusters at once: each has its own pod and service ranges (kind.ranges)


def record_file() -> Path:
    return build.cache_root() / "kind" / "host.json"


@contextmanager
def _record() -> Iterator[dict[str, object]]:
    with build._locked(build.cache_root() / "locks" / "kind-host.lock"):
        path = record_file()
        state: dict[str, object] = json.loads(path.read_text()) if path.is_file() else {}
        state.setdefault("clusters", [])
        yield state
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(state, indent=1, sort_keys=True))


def sysctls() -> dict[str, str]:
    """Every readable sysctl of the host's namespaces but the VOLATILE ones, by path. An
    interface's folder may vanish mid-walk (a real node's pod ending in another lane):
    os.walk skips what is gone, where Path.rglob raised FileNotFoundError."""
    found: dict[str, str] = {}
    for folder, _, files in os.walk(PROC_SYS):
        for name in files:
            path = Path(folder) / name
            key = str(path.relative_to(PROC_SYS))
            if VOLATILE.match(key):
                continue
            with contextlib.suppress(OSError):
                found[key] = path.read_text().strip()
    return found


def changed_sysctls(before: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Keys whose value differs from BEFORE (present both times): key -> (before, now).
    While real nodes run, the keys their kubelets set are theirs to put back
    (hostnet.release_slot), not ours."""
    now = sysctls()
    theirs = hostnet.held_sysctls()
    return {k: (v, now[k]) for k, v in before.items()
            if k in now and now[k] != v and k not in theirs}


def chains() -> list[list[str]]:
    """[tool, table, chain] of every netavark iptables chain on the host."""
    found = []
    for tool in ("iptables", "ip6tables"):
        for table in TABLES:
            proc = subprocess.run([tool, "-t", table, "-S"], capture_output=True, text=True,
                                  check=False)
            found += [[tool, table, line.split()[1]] for line in proc.stdout.splitlines()
                      if line.startswith("-N ") and NETAVARK_CHAIN.match(line.split()[1])]
    return found


def cgroups() -> list[str]:
    """Podman's top-level cgroups in every v1 hierarchy, as `hierarchy/name`."""
    return sorted(f"{h.name}/{name}" for h in hostnet.v1_hierarchies()
                  for name in PODMAN_CGROUPS if (h / name).is_dir())


def claim(cluster: str) -> int:
    """CLUSTER is about to start; the first cluster records the host as it is. CLUSTER's
    slot (0 .. SLOTS-1: which pod and service ranges are its own, kind.ranges), kept while
    it holds the host."""
    with _record() as state:
        clusters: list[str] = state["clusters"]  # type: ignore[assignment]
        slots: dict[str, int] = state.setdefault("slots", {})  # type: ignore[assignment]
        if not clusters:
            # the values before any real node changed them, where real nodes run now
            state["sysctls"] = sysctls() | hostnet.held_sysctls()
            state["chains"] = chains()
            state["cgroups"] = cgroups()
            state["created"] = [str(p) for p in HOST_FOLDERS if not p.exists()]
        if cluster not in slots:
            free = [n for n in range(SLOTS) if n not in slots.values()]
            if not free:
                raise SandboxError(f"{SLOTS} kind clusters hold this host already "
                                   f"({', '.join(sorted(slots))}): delete one first")
            slots[cluster] = free[0]
        if cluster not in clusters:
            clusters.append(cluster)
        slot = slots[cluster]
    MODULES.mkdir(parents=True, exist_ok=True)  # kind mounts it; an empty one is enough
    return slot


def add_routes(cluster: str, wanted: list[tuple[str, str]]) -> None:
    """Route each (destination, via) on the host for CLUSTER, recorded first so that its
    release removes them even when `up` stops half way."""
    with _record() as state:
        held: dict[str, list[list[str]]] = state.setdefault("routes", {})  # type: ignore
        held[cluster] = [list(r) for r in wanted]
    for destination, via in wanted:
        subprocess.run(["ip", "route", "replace", destination, "via", via], check=True,
                       capture_output=True, text=True)


def routes() -> list[str]:
    """The host's IPv4 routes, as `ip route show` prints them."""
    return subprocess.run(["ip", "route", "show"], capture_output=True, text=True,
                          check=False).stdout.splitlines()


def _remove_routes(held: list[list[str]]) -> list[str]:
    removed = []
    for destination, via in held:
        proc = subprocess.run(["ip", "route", "del", destination, "via", via],
                              capture_output=True, check=False)
        if proc.returncode == 0:
            removed.append(destination)
    return removed


def release(cluster: str) -> dict[str, list[str]]:
    """CLUSTER is gone; the last one puts the host back. What was undone, for the log."""
    with _record() as state:
        clusters: list[str] = state["clusters"]  # type: ignore[assignment]
        if cluster in clusters:
            clusters.remove(cluster)
        state.get("slots", {}).pop(cluster, None)  # type: ignore[attr-defined]
        held = state.get("routes", {}).pop(cluster, [])  # type: ignore[attr-defined]
        routed = _remove_routes(held)  # each cluster's own, whether or not it is the last
        if clusters or "sysctls" not in state:
            return {"routes": routed} if routed else {}
        undone = restore(state) | {"routes": routed}
        for key in ("sysctls", "chains", "cgroups", "created"):
            state.pop(key, None)
        return undone


def restore(state: dict[str, object]) -> dict[str, list[str]]:
    """Put back what STATE recorded; what was undone, by kind."""
    saved: dict[str, str] = state["sysctls"]  # type: ignore[assignment]
    written = []
    for key, (before, _now) in changed_sysctls(saved).items():
        with contextlib.suppress(OSError):
            (PROC_SYS / key).write_text(before)
            written.append(key)
    had = {tuple(c) for c in state.get("chains") or []}  # type: ignore[attr-defined]
    removed = [c for c in chains() if tuple(c) not in had]
    for tool, table, chain in removed:  # each with the jumps to it
        hostnet.delete_chain(tool, table, chain)
    old_cgroups = set(state.get("cgroups") or [])  # type: ignore[call-overload]
    new_cgroups = [c for c in cgroups() if c not in old_cgroups]
    for entry in new_cgroups:
        hostnet.remove_cgroup(entry.split("/", 1)[1])
    created: list[str] = state.get("created") or []  # type: ignore[assignment]
    for folder in created:
        subprocess.run(["rm", "-rf", "--one-file-system", folder], check=False)
    return {"sysctls": written, "chains": ["/".join(c) for c in removed],
            "cgroups": new_cgroups, "folders": created}
