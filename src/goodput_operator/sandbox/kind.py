"""A real kind cluster on this machine: `goodput kind up|down|load|status`.

kind v0.33.0 (built from its Go module) creates the cluster with rootful Podman as its
provider, from a node image assembled here (sandbox/kindnode.py), with no registry. Podman's
configuration and storage are the project's own (`<cache>/kind/podman`), so the host's
`/etc/containers` and `/var/lib/containers` are never touched; the machine's traps are each
one setting there (shared/design/KIND.md): default ulimits (root lacks CAP_SYS_RESOURCE),
runc (crun 1.8 refuses this hybrid cgroup v1 host), cgroupfs and file events (no systemd on
the host), and in the cluster `restrict_oom_score_adj` and `failCgroupV1: false`.

kind's own CNI (kindnetd) is not served here, so the cluster is created without one and
`up` does what kindnetd does with Debian's CNI plugins: each node gets a ptp + host-local
configuration for its pod CIDR and a route to every other node's. CoreDNS (the sandbox's
build) and the kwok controller (with the kwok module's own manifests and the sandbox's
stages) run inside the cluster; the simulated fleet is created as in the sandbox.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from goodput_operator.sandbox import build, cluster, fleet, images, kindhost, kindnode, procs
from goodput_operator.sandbox.cluster import Progress, SandboxError
from goodput_operator.sandbox.versions import KIND, KIND_COMPONENT, KUBERNETES, KWOK_COMPONENT

DEFAULT_NAME = "goodput"
CLUSTER_LABEL = "io.x-k8s.kind.cluster"  # on kind's node containers: the cluster's name
PODMAN_PACKAGES = ("podman", "netavark", "aardvark-dns")
CONTROL_PLANE = {"node-role.kubernetes.io/control-plane": ""}
CONTROL_PLANE_TOLERATION = {"key": "node-role.kubernetes.io/control-plane",
                            "operator": "Exists", "effect": "NoSchedule"}
# each cluster's pod and service ranges: a /20 of each per host slot (kindhost.claim), apart
# from the sandbox's (10.244.N.0/24 for real nodes, 10.96.0.0/16 for services), so the host
# routes to every cluster's pods and ClusterIPs beside the sandbox's
POD_RANGES = ipaddress.ip_network("10.245.0.0/16")
SERVICE_RANGES = ipaddress.ip_network("10.97.0.0/16")
SLOT_PREFIX = 20  # a cluster's /20: 16 nodes' /24s of pods, 4096 ClusterIPs
# node affinity of what runs on kind's own nodes only: the simulated fleet's carry its label
OFF_THE_FLEET = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": fleet.FLEET_LABEL, "operator": "DoesNotExist"}]}]}}}


def home() -> Path:
    return build.cache_root() / "kind"


def podman_home() -> Path:
    return home() / "podman"


def containers_conf() -> str:
    """Podman's configuration for kind on this machine (KIND.md's traps 1-3)."""
    root = podman_home()
    return f"""[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{root / 'events.log'}"
static_dir = "{root / 'libpod'}"
volume_path = "{root / 'volumes'}"

[network]
network_backend = "netavark"
network_config_dir = "{root / 'networks'}"
"""


def storage_conf() -> str:
    root = podman_home()
    return f"""[storage]
driver = "overlay"
graphroot = "{root / 'storage'}"
runroot = "{root / 'run'}"
"""


def podman_env() -> dict[str, str]:
    """The environment kind and podman run in: the project's Podman configuration."""
    root = podman_home()
    root.mkdir(parents=True, exist_ok=True)
    for name, text in (("containers.conf", containers_conf()),
                       ("storage.conf", storage_conf())):
        path = root / name
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
    return {**os.environ, "CONTAINERS_CONF": str(root / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(root / "storage.conf"),
            "KIND_EXPERIMENTAL_PROVIDER": "podman"}


def unavailable_reason() -> str | None:
    """Why a kind cluster cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "kind with rootful Podman needs root"
    missing = [p for p in PODMAN_PACKAGES
               if not shutil.which(p) and not Path(f"/usr/lib/podman/{p}").is_file()]
    if missing:
        return (f"missing {', '.join(missing)}: run scripts/install-kind-deps.sh (Debian "
                f"packages {', '.join(PODMAN_PACKAGES)})")
    return None


def podman(*args: str, timeout: float = 600, input_text: str | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], env=podman_env(), capture_output=True, text=True,
                          timeout=timeout, check=False, input=input_text)


def host_address(network: str = "kind") -> str:
    """The host's address on the cluster's Podman network (its gateway): what a pod reaches
    a service on the host at (a Prometheus, say)."""
    proc = podman("network", "inspect", network)
    if proc.returncode != 0:
        raise SandboxError(f"no Podman network {network!r}: {proc.stderr.strip()}")
    [found] = json.loads(proc.stdout)
    gateways = [s["gateway"] for s in found.get("subnets") or [] if "." in s.get("gateway", "")]
    if not gateways:
        raise SandboxError(f"Podman network {network!r} has no IPv4 gateway")
    return str(gateways[0])


@dataclass(frozen=True)
class Ranges:
    """A cluster's pod network (kubeadm's podSubnet: a /24 per node from it) and service
    network (serviceSubnet), and its DNS Service's address (kubeadm's tenth, which the
    kubelets are told)."""

    pods: str
    services: str

    @property
    def dns(self) -> str:
        return str(ipaddress.ip_network(self.services)[10])


def ranges(slot: int) -> Ranges:
    """The ranges of the cluster in host slot SLOT (0 .. kindhost.SLOTS - 1)."""
    return Ranges(str(list(POD_RANGES.subnets(new_prefix=SLOT_PREFIX))[slot]),
                  str(list(SERVICE_RANGES.subnets(new_prefix=SLOT_PREFIX))[slot]))


def kind_binary() -> Path:
    return build.binary_path(KIND_COMPONENT, "kind")


@dataclass(frozen=True)
class KindCluster(cluster.Sandbox):
    """A kind cluster, used through the same kubectl helpers as a sandbox."""

    @property
    def home(self) -> Path:
        return home() / "clusters" / self.name

    @property
    def context(self) -> str:
        return f"kind-{self.name}"

    def kind(self, *args: str, check: bool = True, timeout: float = 600
             ) -> subprocess.CompletedProcess[str]:
        if not kind_binary().is_file():
            raise SandboxError("kind is not built yet: run `goodput kind up` first")
        proc = subprocess.run([str(kind_binary()), *args], env=podman_env(),
                              capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            raise SandboxError(f"kind {' '.join(args[:2])} failed: "
                               f"{' | '.join(lines[-6:]) or 'no output'}")
        return proc

    def node_containers(self) -> list[str]:
        proc = podman("ps", "-a", "--filter", f"label={CLUSTER_LABEL}={self.name}",
                      "--format", "{{.Names}}")
        return sorted(proc.stdout.split()) if proc.returncode == 0 else []

    def exists(self) -> bool:
        return bool(self.node_containers())


def cluster_config(name: str, workers: int, net: Ranges) -> dict[str, Any]:
    """kind's Cluster for NAME: one control plane and WORKERS workers on NET's ranges, no
    default CNI (kindnetd is not served: `up` configures Debian's plugins), and this
    machine's two
    in-cluster traps: containerd's restrict_oom_score_adj (root lacks CAP_SYS_RESOURCE)
    and the kubelet's failCgroupV1 (the host is cgroup v1). kubeadm's CoreDNS addon is
    skipped: the cluster's DNS is the sandbox's CoreDNS build (`cluster_dns`)."""
    return {
        "kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4", "name": name,
        "networking": {"disableDefaultCNI": True, "podSubnet": net.pods,
                       "serviceSubnet": net.services},
        "nodes": [{"role": "control-plane"}, *({"role": "worker"} for _ in range(workers))],
        "containerdConfigPatches": [
            '[plugins."io.containerd.grpc.v1.cri"]\n  restrict_oom_score_adj = true\n'],
        "kubeadmConfigPatches": [
            yaml.safe_dump({"kind": "KubeletConfiguration", "failCgroupV1": False}),
            yaml.safe_dump({"kind": "InitConfiguration",
                            "skipPhases": ["preflight", "addon/coredns"]}),
        ],
    }


def cni_conflist(pod_cidr: str) -> dict[str, Any]:
    """What kindnetd writes on a node: ptp pairs from the node's pod CIDR, host ports."""
    return {"cniVersion": "0.3.1", "name": "goodput-kind", "plugins": [
        {"type": "ptp", "ipMasq": False, "mtu": 1500,
         "ipam": {"type": "host-local", "dataDir": "/run/cni-ipam-state",
                  "routes": [{"dst": "0.0.0.0/0"}], "ranges": [[{"subnet": pod_cidr}]]}},
        {"type": "portmap", "capabilities": {"portMappings": True}}]}


@dataclass(frozen=True)
class KindNode:
    name: str
    address: str
    pod_cidr: str
    control_plane: bool = False


def routes(nodes: Sequence[KindNode]) -> dict[str, list[tuple[str, str]]]:
    """Per node: (pod CIDR, via address) of every other node, kindnetd's routes."""
    return {n.name: [(o.pod_cidr, o.address) for o in nodes if o.name != n.name]
            for n in nodes}


def host_routes(nodes: Sequence[KindNode], net: Ranges) -> list[tuple[str, str]]:
    """(destination, via) the host needs to reach the cluster as its nodes do: each node's
    pods through that node, ClusterIPs through the control plane (its kube-proxy rewrites
    them, and masquerades what comes from outside the pod network, so replies come back
    the same way)."""
    [control] = [n for n in nodes if n.control_plane]
    return [*((n.pod_cidr, n.address) for n in nodes), (net.services, control.address)]


def read_nodes(box: KindCluster) -> list[KindNode]:
    listed = json.loads(box.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    found = []
    for node in listed:
        addresses = {a["type"]: a["address"] for a in node["status"].get("addresses", [])}
        if node["spec"].get("podCIDR") and "InternalIP" in addresses:
            labels = node["metadata"].get("labels") or {}
            found.append(KindNode(node["metadata"]["name"], addresses["InternalIP"],
                                  node["spec"]["podCIDR"],
                                  next(iter(CONTROL_PLANE)) in labels))
    return found


def configure_network(box: KindCluster, count: int, net: Ranges, progress: Progress) -> None:
    """kindnetd's work, done once from outside: every node's CNI configuration and routes;
    and the host's routes to the cluster's pods and ClusterIPs (kept in its host record)."""
    deadline = time.monotonic() + 120
    while len(nodes := read_nodes(box)) < count:
        if time.monotonic() > deadline:
            raise SandboxError(f"only {len(nodes)}/{count} kind nodes have a pod CIDR")
        time.sleep(1)
    progress(f"Pod network: ptp on {', '.join(f'{n.name} {n.pod_cidr}' for n in nodes)}")
    planned = routes(nodes)
    for node in nodes:
        exec_in(node.name, "sh", "-c", "mkdir -p /etc/cni/net.d && cat > "
                "/etc/cni/net.d/10-goodput-kind.conflist",
                input_text=json.dumps(cni_conflist(node.pod_cidr), indent=1))
        for cidr, via in planned[node.name]:
            exec_in(node.name, "ip", "route", "replace", cidr, "via", via)
        # leaving the pod network, a pod's packets take its node's address (the host has
        # no route back to a pod): kindnetd's masquerade, pod to pod left alone
        rule = ["POSTROUTING", "-s", net.pods, "!", "-d", net.pods, "-j", "MASQUERADE"]
        exec_in(node.name, "sh", "-c", "iptables -t nat -C {0} 2>/dev/null || "
                "iptables -t nat -A {0}".format(" ".join(rule)))
    kindhost.add_routes(box.name, host_routes(nodes, net))
    progress(f"Host routes: pods {net.pods} through their nodes, services {net.services} "
             "through the control plane")


def exec_in(node: str, *command: str, input_text: str | None = None) -> str:
    args = ["exec", *(["-i"] if input_text is not None else []), node, *command]
    proc = podman(*args, input_text=input_text, timeout=120)
    if proc.returncode != 0:
        raise SandboxError(f"on {node}: {' '.join(command[:3])} failed: {proc.stderr.strip()}")
    return proc.stdout


def system_pod(spec: dict[str, Any]) -> dict[str, Any]:
    """SPEC placed on the control plane: never on a simulated node, whatever it tolerates."""
    return {**spec, "nodeSelector": CONTROL_PLANE, "tolerations": [CONTROL_PLANE_TOLERATION]}


def cluster_dns(net: Ranges) -> list[dict[str, Any]]:
    """CoreDNS with the sandbox's plugins (errors, kubernetes, cache) as `kube-dns` at the
    address the kubelets name (NET's), in place of kubeadm's addon (its Corefile needs plugins the
    sandbox's build leaves out)."""
    labels = {"k8s-app": "kube-dns"}
    corefile = (".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n"
                "        pods insecure\n        fallthrough in-addr.arpa ip6.arpa\n    }\n"
                "    cache 30\n}\n")
    meta = {"name": "coredns", "namespace": "kube-system"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "goodput:coredns"},
         "rules": [{"apiGroups": [""], "resources": ["services", "pods", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                    "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "goodput:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "goodput:coredns"},
         "subjects": [{"kind": "ServiceAccount", **meta}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
         "data": {"Corefile": corefile}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
            "replicas": 1, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": system_pod({
                "serviceAccountName": "coredns", "dnsPolicy": "Default",
                "containers": [{"name": "coredns", "image": kindnode.COREDNS_IMAGE,
                                "imagePullPolicy": "Never",
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "ports": [{"containerPort": 53, "protocol": "UDP"},
                                          {"containerPort": 53, "protocol": "TCP"}],
                                "volumeMounts": [{"name": "config",
                                                  "mountPath": "/etc/coredns"}]}],
                "volumes": [{"name": "config", "configMap": {"name": "coredns"}}]})}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
         "spec": {"clusterIP": net.dns, "selector": labels, "ports": [
             {"name": "dns", "port": 53, "protocol": "UDP"},
             {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}},
    ]


def kwok_objects(box: KindCluster) -> list[dict[str, Any]]:
    """The kwok controller as the kwok module's own kustomization makes it (CRDs, RBAC,
    Service, Deployment, its configuration), run from the sandbox's kwok build on the
    control plane, and the stages the sandbox plays (cluster.STAGE_FILES and ours)."""
    source = build.module_dir(KWOK_COMPONENT)
    rendered = box.kubectl("kustomize", str(source / "kustomize" / "kwok")).stdout
    found = [d for d in yaml.safe_load_all(rendered) if d]
    for doc in found:
        if doc["kind"] == "Deployment":
            pod = doc["spec"]["template"]["spec"]
            [container] = pod["containers"]
            container |= {"image": kindnode.KWOK_IMAGE, "imagePullPolicy": "Never"}
            doc["spec"]["template"]["spec"] = system_pod(pod)
    return found + [d for text in cluster.stage_texts() for d in yaml.safe_load_all(text) if d]


def up(box: KindCluster, workers: int = 1, fleet_ref: str = fleet.DEFAULT_FLEET,
       progress: Progress = build.print_progress, wait_seconds: float = 300) -> fleet.Fleet:
    """Build what is missing, create the cluster, its network, DNS and kwok, the fleet."""
    chosen = fleet.load(fleet_ref)
    reason = unavailable_reason()
    if reason:
        raise SandboxError(f"cannot run kind here: {reason}")
    # before Podman's first call (it makes host folders too); one name claims once, so a
    # cluster that exists already keeps its own claim
    net = ranges(kindhost.claim(box.name))
    if box.exists():
        raise SandboxError(f"kind cluster {box.name!r} exists already: run `goodput kind down "
                           f"--name {box.name}` first or pick another --name")
    started = time.monotonic()
    try:
        _create(box, workers, net, progress, wait_seconds)
        nodes = fleet.nodes(chosen)
        cluster.create_nodes(box, nodes, chosen.name, progress)
        cluster.start_drivers(box, nodes, progress)  # the DRA drivers' devices, as the sandbox
        box.fleet_file.write_text(json.dumps({"fleet": fleet_ref, "name": chosen.name}))
        cluster.wait_nodes_ready(box, chosen.node_count + 1 + workers, wait_seconds, progress)
    except BaseException:
        logs = box.home / "logs"
        if box.exists():
            box.kind("export", "logs", str(logs), "--name", box.name, check=False)
            progress(f"kind cluster {box.name!r} failed to come up; its logs: {logs}")
        down(box, progress)
        raise
    progress(f"kind cluster {box.name!r} is up in {time.monotonic() - started:.0f}s "
             f"(kubeconfig {box.kubeconfig}).")
    return chosen


def _create(box: KindCluster, workers: int, net: Ranges, progress: Progress,
            wait_seconds: float) -> None:
    """The cluster itself: node image, kind, pod network, DNS and kwok."""
    build.build(KIND_COMPONENT, progress)
    image = kindnode.node_image(podman, progress)
    box.home.mkdir(parents=True, exist_ok=True)
    config = box.home / "kind.yaml"
    config.write_text(yaml.safe_dump(cluster_config(box.name, workers, net), sort_keys=False))
    progress(f"Creating kind cluster {box.name!r} (kind {KIND}, Kubernetes {KUBERNETES}, "
             f"Podman; 1 control plane + {workers} worker(s))...")
    box.kind("create", "cluster", "--name", box.name, "--config", str(config), "--image",
             image.name, "--kubeconfig", str(box.kubeconfig), timeout=900)
    configure_network(box, 1 + workers, net, progress)
    # kube-proxy's DaemonSet tolerates every taint, and the storage provisioner asks only
    # for Linux: both kept off the simulated nodes
    keep_off = json.dumps({"spec": {"template": {"spec": {"affinity": OFF_THE_FLEET}}}})
    box.kubectl("patch", "daemonset", "kube-proxy", "-n", "kube-system", "--type", "merge",
                "-p", keep_off)
    box.kubectl("patch", "deployment", "local-path-provisioner", "-n", "local-path-storage",
                "--type", "merge", "-p", keep_off)
    progress("Cluster DNS (CoreDNS), the kwok controller and its stages...")
    box.apply(*cluster_dns(net))
    kwok = kwok_objects(box)
    crds = [d for d in kwok if d["kind"] == "CustomResourceDefinition"]
    box.apply(*crds)
    cluster.wait_established(box.kubeconfig, *(f"crd/{d['metadata']['name']}" for d in crds))
    box.apply(*(d for d in kwok if d["kind"] != "CustomResourceDefinition"))
    box.kubectl("rollout", "status", "-n", "kube-system", "deployment/kwok-controller",
                "deployment/coredns", f"--timeout={int(wait_seconds)}s",
                timeout=wait_seconds + 30)


def load(box: KindCluster, found: Sequence[images.Image],
         progress: Progress = build.print_progress) -> None:
    """Import each image archive into every node of the cluster."""
    for image in found:
        progress(f"Loading {image.name} into kind cluster {box.name!r}...")
        box.kind("load", "image-archive", str(image.archive), "--name", box.name,
                 timeout=600)


def down(box: KindCluster, progress: Progress = build.print_progress) -> bool:
    """Delete the cluster and its network; the last cluster puts the host back as found
    (sysctls, iptables chains, cgroups, /lib/modules). True if there was one."""
    procs.kill_pidfile(box.home / "drivers.pid")  # the compute domains' controller, if run
    existed = box.exists()
    if existed:
        box.kind("delete", "cluster", "--name", box.name, "--kubeconfig",
                 str(box.kubeconfig), timeout=300)
    box.kubeconfig.unlink(missing_ok=True)
    box.fleet_file.unlink(missing_ok=True)
    if not podman("ps", "-a", "--format", "{{.Names}}").stdout.split():
        podman("network", "rm", "--force", "kind")
        podman("volume", "prune", "--force")
    undone = kindhost.release(box.name)
    if undone:
        progress("Host put back as found: " + ", ".join(
            f"{len(items)} {what}" for what, items in undone.items()))
    return existed
