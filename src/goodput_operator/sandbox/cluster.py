"""Start, inspect and stop a sandbox: a real control plane on 127.0.0.1 with KWOK nodes.

kwokctl's binary runtime starts etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and the kwok controller as local processes. Every binary is handed to it
as a path we built (build.py); any binary left unset would make kwokctl try to download
it, which fails on machines that reach only package registries. The stages (node
lifecycle, pod lifecycle, and the chaos stages used for fault injection) are read from
the pinned kwok module in Go's module cache, so they always match the kwok we run.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from goodput_operator.sandbox import build, drivers, fleet, hostnet, images, procs, realnode
from goodput_operator.sandbox.versions import (
    ETCD,
    KUBERNETES,
    KUBERNETES_COMPONENT,
    KWOK,
    KWOK_COMPONENT,
    REAL_NODE_COMPONENTS,
)

DEFAULT_NAME = "goodput"
# Stages shipped in the kwok module. If a kwokctl config names any Stage, kwokctl adds
# none of its defaults, so the defaults (node/fast, heartbeat-with-lease, pod/fast) are
# listed here together with the chaos stages that fault injection relies on.
HEARTBEAT_STAGE = "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"
STAGE_FILES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    HEARTBEAT_STAGE,
    "kustomize/stage/node/chaos/node-not-ready.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
    "kustomize/stage/pod/chaos/pod-container-running-failed.yaml",
)

OWN_STAGES = Path(__file__).parent / "stages"  # ours, e.g. pods that succeed on demand
COMPLETE_STAGE = "kustomize/stage/pod/fast/pod-complete.yaml"
# a Job's pod labelled so keeps running (kwok's pod-complete finishes every Job's pod at
# once): a peer's gangs that must hold their nodes, as Indexed Jobs (bench.peers_placement)
KEEP_RUNNING = "sandbox.goodput.dev/keep-running"
SERVICE_RANGE = "10.96.0.0/16"
NODE_MONITOR_PERIOD_MS = 5_000
NODE_MONITOR_GRACE_MS = 50_000
HEARTBEAT_NODES = 5_000  # above this many simulated nodes (and no real node): no heartbeats
QUIET_GRACE_MS = 7 * 24 * 3600 * 1000  # a heartbeat-free node turns Unknown after a week
QUIET_PARALLELISM = 16  # KWOK's stage workers for nodes and for pods on such a fleet
AUDIT_POLICY = Path(__file__).parent / "audit-policy.yaml"
Progress = Callable[[str], None]


class SandboxError(RuntimeError):
    """A sandbox operation that cannot proceed; the message says why and what to do."""


def kubectl_binary() -> str:
    """The kubectl built with the sandbox, else whatever `kubectl` is on PATH."""
    built = build.binary_path(KUBERNETES_COMPONENT, "kubectl")
    return str(built) if built.is_file() else "kubectl"


def run_kubectl(kubeconfig: Path, *args: str, timeout: float = 120,
                input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl_binary(), "--kubeconfig", str(kubeconfig), *args], capture_output=True,
        text=True, timeout=timeout, check=False, input=input_text,
    )


def wait_established(kubeconfig: Path, *targets: str, timeout: float = 60) -> None:
    """`kubectl wait --for=condition=Established TARGETS` (names or `-f PATH`), which fails
    at once, instead of waiting, on a CRD the API server has not written a status for
    yet (`.status.conditions accessor error`): seen when two sandboxes start together on
    two cores. Retried until TIMEOUT; any other failure is raised as it came."""
    deadline = time.monotonic() + timeout
    while True:
        left = max(1, int(deadline - time.monotonic()))
        proc = run_kubectl(kubeconfig, "wait", "--for=condition=Established",
                           f"--timeout={left}s", *targets, timeout=left + 30)
        if proc.returncode == 0:
            return
        if "accessor error" not in proc.stderr or time.monotonic() > deadline:
            raise SandboxError(f"CRDs not established ({' '.join(targets)}): "
                               f"{proc.stderr.strip()}")
        time.sleep(0.5)


# Kubernetes' own gang and topology-aware workload scheduling, alpha in v1.36 (PEERS.md):
# a peer for the head-to-head benchmarks, on only where a sandbox asks for it
UPSTREAM_GANG_GATES = ("GenericWorkload=true,GangScheduling=true,"
                       "TopologyAwareWorkloadScheduling=true,WorkloadAwarePreemption=true,"
                       "WorkloadWithJob=true")
UPSTREAM_GANG_API = "scheduling.k8s.io/v1alpha2=true"


@dataclass(frozen=True)
class Sandbox:
    """Paths and commands of one named sandbox. UPSTREAM_GANG: its control plane starts
    with Kubernetes' alpha gang scheduling on (Workload and PodGroup, v1alpha2)."""

    name: str = DEFAULT_NAME
    upstream_gang: bool = False

    @property
    def home(self) -> Path:
        return build.cache_root() / "sandboxes" / self.name

    @property
    def kubeconfig(self) -> Path:
        return self.home / "kubeconfig"

    @property
    def fleet_file(self) -> Path:
        return self.home / "fleet.json"

    @property
    def context(self) -> str:
        return f"kwok-{self.name}"

    def kwokctl_env(self) -> dict[str, str]:
        # Keep kwokctl's state beside our own instead of in ~/.kwok.
        return {**os.environ, "KWOK_WORKDIR": str(build.cache_root() / "kwok")}

    def kwokctl(self, *args: str, check: bool = True, timeout: float = 300) -> str:
        binary = build.binary_path(KWOK_COMPONENT, "kwokctl")
        if not binary.is_file():
            raise SandboxError("kwokctl is not built yet: run `goodput sandbox up` first")
        proc = subprocess.run(
            [str(binary), *args], env=self.kwokctl_env(), capture_output=True, text=True,
            timeout=timeout, check=False,
        )
        if check and proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            raise SandboxError(f"kwokctl {args[0]} {args[1] if len(args) > 1 else ''} failed: "
                               f"{detail[-1] if detail else 'no output'}")
        return proc.stdout

    def exists(self) -> bool:
        """kwokctl knows a cluster of this name (running or stopped)."""
        if not build.binary_path(KWOK_COMPONENT, "kwokctl").is_file():
            return False
        return self.name in self.kwokctl("get", "clusters", check=False).split()

    def is_running(self) -> bool:
        """The API server answers on the sandbox's kubeconfig."""
        if not self.kubeconfig.is_file():
            return False
        try:
            proc = self.kubectl("get", "--raw", "/readyz", check=False, timeout=10)
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0 and proc.stdout.strip() == "ok"

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120,
                input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        """kubectl of the sandbox's Kubernetes version, on the sandbox's kubeconfig."""
        proc = run_kubectl(self.kubeconfig, *args, timeout=timeout, input_text=input_text)
        if check and proc.returncode != 0:
            raise SandboxError(f"kubectl {' '.join(args[:2])} failed: {proc.stderr.strip()}")
        return proc

    def apply(self, *objects: dict[str, Any], timeout: float = 120) -> None:
        """Server-side apply OBJECTS as one List (kubectl takes over fields another manager
        set); nothing to apply, nothing asked."""
        if objects:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                         timeout=timeout, input_text=json.dumps(
                             {"apiVersion": "v1", "kind": "List", "items": list(objects)}))

    def real_runtime(self, progress: Progress = build.print_progress) -> realnode.Runtime:
        """The sandbox's real nodes (kubelets, containerds, CoreDNS)."""
        def kubectl(*args: str, check: bool = True, timeout: float = 120
                    ) -> subprocess.CompletedProcess[str]:
            return self.kubectl(*args, check=check, timeout=timeout)
        return realnode.Runtime(self.name, self.home, self.kubeconfig, kubectl, progress)

    @property
    def audit_log(self) -> Path:
        """What service accounts did (AUDIT_POLICY), one JSON event per line."""
        return build.cache_root() / "kwok" / "clusters" / self.name / "logs" / "audit.log"

    @staticmethod
    def heartbeats(real_nodes: int, simulated_nodes: int) -> bool:
        """Whether KWOK renews the simulated nodes' Leases and status: not on a fleet of
        over HEARTBEAT_NODES simulated nodes alone (real kubelets need Kubernetes' own
        timing, whatever the fleet)."""
        return bool(real_nodes) or simulated_nodes <= HEARTBEAT_NODES

    def kwokctl_config(self, binaries: dict[str, Path], real_nodes: int = 0,
                       simulated_nodes: int = 0) -> str:
        """The KwokctlConfiguration plus the stage documents, as one YAML stream."""
        quiet = not self.heartbeats(real_nodes, simulated_nodes)  # no heartbeats, no Leases
        kube_dir = binaries["kube-apiserver"].parent
        options = {
            "runtime": "binary",
            "bindAddress": "127.0.0.1",
            "kubeVersion": KUBERNETES,
            "etcdVersion": ETCD.lstrip("v"),
            "kwokVersion": KWOK,
            "kubeBinaryPrefix": str(kube_dir),
            "kubeApiserverBinary": str(binaries["kube-apiserver"]),
            "kubeControllerManagerBinary": str(binaries["kube-controller-manager"]),
            "kubeSchedulerBinary": str(binaries["kube-scheduler"]),
            "kubectlBinary": str(binaries["kubectl"]),
            "etcdBinary": str(binaries["etcd"]),
            "kwokControllerBinary": str(binaries["kwok"]),
            # kwok's default heartbeats (10 s status, 50 s grace) are kept: injected node
            # failures flip Ready at once through the chaos stage, and faster heartbeats
            # would load a 2-core machine running thousands of simulated nodes.
            "disableQPSLimits": True,
            "kubeAuditPolicy": str(AUDIT_POLICY),
            # RBAC enforced, as on a real cluster: the e2e tests run the operator with the
            # Helm chart's ServiceAccount, and a missing verb must be refused
            "kubeAuthorization": True,
        }
        if self.upstream_gang:
            options |= {"kubeFeatureGates": UPSTREAM_GANG_GATES,
                        "kubeRuntimeConfig": UPSTREAM_GANG_API}
        if real_nodes:
            # Kubernetes' own defaults for the node lifecycle controller, so a real node
            # that stops renewing its Lease goes NotReady 50 s later (checked every 5 s), as
            # on a real cluster; KWOK then renews simulated nodes' leases every 10 s like a
            # kubelet (heartbeat factor 1; kwokctl multiplies all of these by its factor).
            # Without real nodes kwokctl's defaults stay (factor 5: leases every 50 s,
            # monitor period 25 s, grace 200 s): fewer lease writes, and simulated failures
            # flip Ready at once through KWOK's chaos stage anyway.
            options |= {"heartbeatFactor": 1,
                        "kubeControllerManagerNodeMonitorPeriodMilliseconds":
                            NODE_MONITOR_PERIOD_MS,
                        "kubeControllerManagerNodeMonitorGracePeriodMilliseconds":
                            NODE_MONITOR_GRACE_MS}
        elif quiet:
            # no heartbeats: 20,000 simulated Leases renewed on two shared cores fell
            # behind whenever anything else ran, and the node lifecycle controller took the
            # nodes for dead (191 quarantined in 3 minutes; bench/HISTORY.md). Without KWOK's
            # heartbeat stage a node stays as its initialization left it, Ready, and the
            # controller-manager waits a week before it calls a silent node Unknown.
            # Injected failures still flip Ready at once (the chaos stage), and the operator
            # never judges a node that has no Lease by Lease silence.
            options["kubeControllerManagerNodeMonitorGracePeriodMilliseconds"] = QUIET_GRACE_MS
        apiserver_args: list[dict[str, object]] = [
            # the default service range is a /24: 254 ClusterIPs, too few for a fleet
            # serving hundreds of InferenceEndpoints
            {"key": "service-cluster-ip-range", "value": SERVICE_RANGE},
            # logs and exec reach real kubelets by InternalIP (their hostnames do not
            # resolve); set at creation: restarting the apiserver later loses the scheduler
            # and controller-manager
            {"key": "kubelet-preferred-address-types", "value": "InternalIP,Hostname"}]
        config = {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokctlConfiguration",
            "options": options,
            "componentsPatches": [
                {"name": "kube-apiserver", "extraArgs": apiserver_args},
                # kwok manages only the fleet's simulated nodes, never a real kubelet's
                {"name": "kwok-controller", "extraArgs": [
                    {"key": "manage-all-nodes", "value": "false"},
                    {"key": "manage-nodes-with-annotation-selector",
                     "value": fleet.FAKE_NODE_SELECTOR},
                    # quiet: no Lease either. Without its heartbeat stage KWOK still
                    # created and renewed every node's Lease (a quarter of 200 s apart:
                    # 20,000 renewals queued on four workers, all run long), and an
                    # operator's restart listed them; 0 turns KWOK's Lease controller off
                    # (kwokctl would default a 0 in the options back to 40)
                    *([{"key": "node-lease-duration-seconds", "value": "0",
                        "override": True}] if quiet else [])]},
            ],
        }
        if real_nodes:
            # pods on real nodes reach the API server as on a real cluster: through the
            # `kubernetes` Service (kube-proxy sends it to the host's address), so it listens
            # beyond loopback and its certificate names the Service's and the host's address
            apiserver_args.append({"key": "bind-address", "value": "0.0.0.0", "override": True})
            options["kubeApiserverCertSANs"] = [api_service_ip(), hostnet.host_ip()]
        stages = stage_texts(quiet)
        documents = [config]
        if quiet:
            # KWOK plays each node's and pod's stages on 4 workers by default: 20,000 nodes'
            # initialisation took 10 a second here, each worker waiting on one PATCH
            documents.append({"apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                              "kind": "KwokConfiguration",
                              "options": {"nodePlayStageParallelism": QUIET_PARALLELISM,
                                          "podPlayStageParallelism": QUIET_PARALLELISM}})
        return "---\n".join([*(yaml.safe_dump(d, sort_keys=False) for d in documents),
                             *stages])


def api_service_ip() -> str:
    """The `kubernetes` Service's ClusterIP: the first address of the service range."""
    return str(ipaddress.ip_network(SERVICE_RANGE)[1])


def system_node(name: str) -> dict[str, Any]:
    """A real node outside the fleet, without accelerators: where cluster services such as
    the operator itself run (a CPU node pool on a real cluster)."""
    labels = {realnode.SYSTEM_LABEL: "true", "node-role.kubernetes.io/system": ""}
    return {"metadata": {"name": name, "labels": labels}, "status": {}}


def stage_texts(quiet: bool = False) -> list[str]:
    """The stages KWOK plays (kwok's own, from its module, and ours), as YAML texts; QUIET:
    without the node heartbeat."""
    source = build.module_dir(KWOK_COMPONENT)
    stages = [stage_text(rel, (source / rel).read_text()) for rel in STAGE_FILES
              if rel != HEARTBEAT_STAGE or not quiet]
    return stages + [p.read_text() for p in sorted(OWN_STAGES.glob("*.yaml"))]


def stage_text(rel: str, text: str) -> str:
    """A kwok stage as the sandbox plays it: pod-complete spares pods labelled
    KEEP_RUNNING (any value). A stage not shaped as kwok v0.8 writes it is played as it
    is (bench.peers_placement then finds its gangs' pods gone, and says so)."""
    if rel != COMPLETE_STAGE:
        return text
    keep = (f"    - key: '.metadata.labels[\"{KEEP_RUNNING}\"]'\n"
            "      operator: 'DoesNotExist'\n")
    marker = "    matchExpressions:\n"
    return text.replace(marker, marker + keep, 1)


def up(sandbox: Sandbox, fleet_ref: str = fleet.DEFAULT_FLEET,
       progress: Progress = build.print_progress, wait_seconds: float = 180,
       real_nodes: int = 0, system_nodes: int = 0) -> fleet.Fleet:
    """Build (first time), start the control plane, create the fleet's nodes, wait for Ready.

    REAL_NODES: the fleet's first nodes (in fleet order: the first UltraServer first) are
    real kubelets running real containers instead of simulated nodes. SYSTEM_NODES: real
    nodes without accelerators beside the fleet (system-0, ...), for the operator's pods."""
    chosen = fleet.load(fleet_ref)  # validate before spending minutes on anything
    if not 0 <= real_nodes <= chosen.node_count:
        raise SandboxError(f"--real-nodes must be 0..{chosen.node_count} (the fleet's nodes), "
                           f"got {real_nodes}")
    if system_nodes < 0:
        raise SandboxError(f"--system-nodes must be 0 or more, got {system_nodes}")
    real_nodes_wanted = real_nodes + system_nodes
    if real_nodes_wanted:
        reason = hostnet.unavailable_reason()
        names = [n["metadata"]["name"] for n in fleet.nodes(chosen)[:real_nodes]]
        names += [f"system-{i}" for i in range(system_nodes)]
        reason = reason or next(filter(None, (realnode.path_too_long(sandbox.home, n)
                                              for n in names)), None)
        if reason:
            raise SandboxError(f"cannot run real nodes here: {reason}")
    if sandbox.is_running():
        raise SandboxError(
            f"sandbox {sandbox.name!r} is already running (kubeconfig {sandbox.kubeconfig}); "
            f"run `goodput sandbox down --name {sandbox.name}` first or pick another --name"
        )
    started = time.monotonic()
    binaries = build.ensure_all(progress=progress)
    if real_nodes_wanted:  # before the control plane starts: the first build takes minutes
        build.ensure_all(REAL_NODE_COMPONENTS, progress)
        images.ensure_images(progress)
    if sandbox.exists():  # left over from a crash or a reboot: start clean
        procs.kill_pidfile(sandbox.home / "drivers.pid")
        sandbox.kwokctl("delete", "cluster", "--name", sandbox.name, check=False)
    sandbox.home.mkdir(parents=True, exist_ok=True)
    config_path = sandbox.home / "kwokctl.yaml"
    config_path.write_text(sandbox.kwokctl_config(binaries, real_nodes_wanted,
                                                  chosen.node_count - real_nodes))
    sandbox.kubeconfig.unlink(missing_ok=True)
    progress(f"Starting control plane {sandbox.name!r} (Kubernetes {KUBERNETES}, etcd {ETCD}, "
             f"kwok {KWOK}) on 127.0.0.1...")
    # one create at a time on this host: kwokctl picks each component's port by finding
    # one unused, and two sandboxes started at once (test lanes) could pick the same
    with build._locked(build.cache_root() / "locks" / "kwokctl-create.lock"):
        sandbox.kwokctl(
            "create", "cluster", "--name", sandbox.name, "--config", str(config_path),
            "--kubeconfig", str(sandbox.kubeconfig), "--wait", "120s", timeout=240,
        )
    if not sandbox.kubeconfig.is_file():
        # kwokctl only logs a failure to add its context and exits 0: seen once, in a cold
        # `make test` (the real-node lane's sandbox); the cluster is up, so ask for it
        progress(f"kwokctl wrote no kubeconfig for {sandbox.name!r}; asking it for one")
        sandbox.kubeconfig.write_text(sandbox.kwokctl("get", "kubeconfig", "--name",
                                                      sandbox.name))
    all_nodes = fleet.nodes(chosen)
    create_nodes(sandbox, all_nodes[real_nodes:], chosen.name, progress)
    start_drivers(sandbox, all_nodes[real_nodes:], progress)
    sandbox.fleet_file.write_text(json.dumps({"fleet": fleet_ref, "name": chosen.name}))
    if real_nodes_wanted:
        progress(f"Starting {real_nodes_wanted} real node(s): kubelet + containerd each...")
        runtime = sandbox.real_runtime(progress)
        for node in all_nodes[:real_nodes]:
            runtime.add(node)
        for index in range(system_nodes):
            runtime.add(system_node(f"system-{index}"))
    wait_nodes_ready(sandbox, chosen.node_count + system_nodes, wait_seconds, progress)
    progress(f"Sandbox {sandbox.name!r} is up in {time.monotonic() - started:.0f}s.")
    return chosen


NODE_BATCH = 500  # nodes a kubectl call creates
NODE_STREAMS = 4  # kubectl calls at once
DRA_NODES = 1000  # the largest fleet whose nodes publish ResourceSlices (start_drivers)


def start_drivers(sandbox: Sandbox, nodes: list[dict[str, Any]], progress: Progress) -> None:
    """Publish what the simulated nodes' DRA drivers publish (sandbox.drivers) and start
    the compute domains' controller, when the fleet has GB200 nodes. Fleets past
    DRA_NODES (the synthetic scale fleets) publish nothing: a real node advertises its
    devices either by device plugin or by DRA driver, and the benchmarks measure the
    former."""
    if len(nodes) > DRA_NODES:
        progress(f"{len(nodes)} nodes: no DRA drivers simulated (at most {DRA_NODES})")
        return
    published = drivers.objects(nodes)
    if not published:
        return
    crds = [o for o in published if o["kind"] == "CustomResourceDefinition"]
    rest = [o for o in published if o["kind"] != "CustomResourceDefinition"]
    progress(f"Publishing the DRA drivers' objects: {len(rest)} DeviceClasses and "
             "ResourceSlices (Neuron devices, GB200 IMEX channels)...")
    for crd in crds:
        sandbox.kubectl("apply", "-f", "-", input_text=json.dumps(crd))
        wait_established(sandbox.kubeconfig, f"crd/{crd['metadata']['name']}")
    for start in range(0, len(rest), 500):
        document = {"apiVersion": "v1", "kind": "List", "items": rest[start:start + 500]}
        sandbox.kubectl("apply", "-f", "-", input_text=json.dumps(document), timeout=300)
    if crds:  # the compute domains' controller
        procs.spawn([sys.executable, "-m", "goodput_operator.sandbox.drivers", "--kubeconfig",
                     str(sandbox.kubeconfig)], sandbox.home / "drivers.log",
                    sandbox.home / "drivers.pid")


def create_nodes(sandbox: Sandbox, nodes: list[dict[str, Any]], fleet_name: str,
                 progress: Progress) -> None:
    """Create simulated Node objects in batches through kubectl (status included), a few
    batches at once: kubectl creates a list's items one request after another, and at
    20,000 nodes one stream of them was most of the fleet's start."""
    progress(f"Creating {len(nodes)} simulated nodes ({fleet_name})...")
    batches = [nodes[start:start + NODE_BATCH] for start in range(0, len(nodes), NODE_BATCH)]

    def create(items: list[dict[str, Any]]) -> None:
        document = {"apiVersion": "v1", "kind": "List", "items": items}
        sandbox.kubectl("create", "-f", "-", input_text=json.dumps(document), timeout=300)

    with concurrent.futures.ThreadPoolExecutor(NODE_STREAMS) as pool:
        list(pool.map(create, batches))  # re-raises the first failure


def node_readiness(sandbox: Sandbox, expected: int = 0) -> tuple[int, int]:
    """(ready, total) nodes as the API server reports them, read from its table (name and
    status columns), not whole objects: 20,000 nodes' JSON, listed every half second, took
    over a minute a list on this machine and slowed the fleet's start for everything."""
    proc = sandbox.kubectl("get", "nodes", "--no-headers", timeout=max(60.0, expected / 100))
    statuses = [line.split()[1] for line in proc.stdout.splitlines() if len(line.split()) > 1]
    return sum(1 for status in statuses if "Ready" in status.split(",")), len(statuses)


def is_node_ready(node: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in node.get("status", {}).get("conditions", [])
    )


def wait_nodes_ready(sandbox: Sandbox, expected: int, timeout: float, progress: Progress) -> None:
    deadline = time.monotonic() + timeout
    last = (-1, -1)
    while True:
        ready, total = node_readiness(sandbox, expected)
        if ready >= expected and total >= expected:
            progress(f"All {expected} nodes are Ready.")
            return
        if (ready, total) != last:
            progress(f"  {ready}/{expected} nodes Ready...")
            last = (ready, total)
        if time.monotonic() > deadline:
            raise SandboxError(
                f"only {ready}/{expected} nodes became Ready within {timeout:.0f}s; "
                f"see `kwokctl logs kwok-controller --name {sandbox.name}` "
                f"(KWOK_WORKDIR={build.cache_root() / 'kwok'})"
            )
        time.sleep(max(0.5, expected / 2000))  # a list of 20,000 nodes is work for the API


def add_real_node(sandbox: Sandbox, name: str | None = None,
                  progress: Progress = build.print_progress, system: bool = False) -> str:
    """Turn one fleet node (NAME, else the first one still simulated) into a real node; or,
    with SYSTEM, add a real node without accelerators (NAME, else the next system-N)."""
    require_running(sandbox)
    if system:
        if "0.0.0.0" not in (sandbox.home / "kwokctl.yaml").read_text():
            progress("  note: this sandbox's API server listens on 127.0.0.1 only, so pods "
                     "cannot reach it; start it with --real-nodes or --system-nodes for that")
        real = {n.name for n in realnode.load(sandbox.home)}
        name = name or next(f"system-{i}" for i in range(len(real) + 1)
                            if f"system-{i}" not in real)
        build.ensure_all((KUBERNETES_COMPONENT, *REAL_NODE_COMPONENTS), progress)
        sandbox.real_runtime(progress).add(system_node(name))
        return name
    if not sandbox.fleet_file.is_file():
        raise SandboxError(f"sandbox {sandbox.name!r} has no fleet record; recreate it")
    chosen = fleet.load(json.loads(sandbox.fleet_file.read_text())["fleet"])
    real = {n.name for n in realnode.load(sandbox.home)}
    candidates = [n for n in fleet.nodes(chosen) if n["metadata"]["name"] not in real]
    if name is not None:
        candidates = [n for n in candidates if n["metadata"]["name"] == name]
    if not candidates:
        raise SandboxError(f"no simulated fleet node {'named ' + name if name else 'left'} "
                           f"to make real in sandbox {sandbox.name!r}")
    node = candidates[0]
    node_name: str = node["metadata"]["name"]
    build.ensure_all((KUBERNETES_COMPONENT, *REAL_NODE_COMPONENTS), progress)
    sandbox.kubectl("delete", "node", node_name, "--ignore-not-found", "--wait=true")
    sandbox.real_runtime(progress).add(node)
    return node_name


def load_operator_image(sandbox: Sandbox, image: images.Image) -> list[str]:
    """Import IMAGE into the sandbox's system nodes (where the chart's pods run); their
    names."""
    nodes = [n for n in realnode.load(sandbox.home) if n.is_system]
    for node in nodes:
        images.import_image(node.ctr(), image)
    return [n.name for n in nodes]


def down(sandbox: Sandbox) -> bool:
    """Stop and delete the sandbox (real nodes first, leaving the host as it was); True if
    there was one."""
    if realnode.load(sandbox.home):
        sandbox.real_runtime().remove_all(drain=sandbox.is_running())
    procs.kill_pidfile(sandbox.home / "drivers.pid")
    for peer in ("kueue", "jobset", "lws"):  # sandbox.kueue, .jobset, .lws, if started
        procs.kill_pidfile(sandbox.home / peer / f"{peer}.pid")
    for scaler in ("prometheus-adapter", "keda-operator", "keda-adapter"):  # sandbox.scalers
        procs.kill_pidfile(sandbox.home / "scalers" / f"{scaler}.pid")
    procs.kill_pidfile(sandbox.home / "objectstore" / "versitygw.pid")  # sandbox.objectstore
    existed = sandbox.exists()
    if existed:
        sandbox.kwokctl("delete", "cluster", "--name", sandbox.name, timeout=120)
    sandbox.kubeconfig.unlink(missing_ok=True)
    sandbox.fleet_file.unlink(missing_ok=True)
    return existed


@dataclass(frozen=True)
class Status:
    name: str
    running: bool
    kubeconfig: Path
    fleet: str | None
    nodes_ready: int
    nodes_total: int


def status(sandbox: Sandbox) -> Status:
    running = sandbox.is_running()
    ready, total = node_readiness(sandbox) if running else (0, 0)
    fleet_name = None
    if sandbox.fleet_file.is_file():
        fleet_name = json.loads(sandbox.fleet_file.read_text()).get("name")
    return Status(sandbox.name, running, sandbox.kubeconfig, fleet_name, ready, total)


def require_running(sandbox: Sandbox) -> None:
    if not sandbox.is_running():
        raise SandboxError(
            f"sandbox {sandbox.name!r} is not running: start it with "
            f"`goodput sandbox up --name {sandbox.name}`"
        )
