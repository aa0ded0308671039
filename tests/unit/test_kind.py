"""`goodput kind` (sandbox/kind.py, kindnode.py, kindhost.py): what the cluster, its nodes,
its network, DNS and kwok are given, and how the host is put back. The cluster itself runs
in the kind lane (tests/kind/); these need nothing built."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
import yaml

from goodput_operator.sandbox import build, kind, kindhost, kindnode
from goodput_operator.sandbox.versions import KWOK_COMPONENT

pytestmark = pytest.mark.unit


def test_podman_is_configured_for_this_machines_traps_and_kept_private() -> None:
    conf = kind.containers_conf()
    # root lacks CAP_SYS_RESOURCE; crun refuses the hybrid cgroup v1 host; no host systemd
    assert 'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]' in conf
    assert 'runtime = "runc"' in conf and 'cgroup_manager = "cgroupfs"' in conf
    assert 'events_logger = "file"' in conf and 'log_driver = "k8s-file"' in conf
    assert 'network_backend = "netavark"' in conf  # workers find the control plane by name
    storage = kind.storage_conf()
    for text in (conf, storage):  # nothing under /etc/containers or /var/lib/containers
        paths = [line.split("=", 1)[1].strip().strip('"') for line in text.splitlines()
                 if line.strip().endswith('"') and '= "/' in line]
        assert paths and all(Path(p).is_relative_to(build.cache_root()) for p in paths)
    env = kind.podman_env()
    assert env["KIND_EXPERIMENTAL_PROVIDER"] == "podman"
    assert Path(env["CONTAINERS_CONF"]).read_text() == conf
    assert Path(env["CONTAINERS_STORAGE_CONF"]).read_text() == storage


def test_the_cluster_has_no_default_cni_and_this_machines_in_cluster_settings() -> None:
    config = kind.cluster_config("c", 2, kind.ranges(1))
    assert config["name"] == "c" and config["networking"] == {
        "disableDefaultCNI": True, "podSubnet": "10.245.16.0/20",
        "serviceSubnet": "10.97.16.0/20"}
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker", "worker"]
    assert "restrict_oom_score_adj = true" in config["containerdConfigPatches"][0]
    patches = {d["kind"]: d for d in map(yaml.safe_load, config["kubeadmConfigPatches"])}
    assert patches["KubeletConfiguration"]["failCgroupV1"] is False
    # kind's own skip (no image pulls) kept; kubeadm's CoreDNS replaced by the sandbox's
    assert patches["InitConfiguration"]["skipPhases"] == ["preflight", "addon/coredns"]


def test_each_node_gets_ptp_on_its_pod_cidr_and_a_route_to_every_other_node() -> None:
    nodes = [kind.KindNode("cp", "10.89.0.2", "10.244.0.0/24"),
             kind.KindNode("w1", "10.89.0.3", "10.244.1.0/24"),
             kind.KindNode("w2", "10.89.0.4", "10.244.2.0/24")]
    assert kind.routes(nodes) == {
        "cp": [("10.244.1.0/24", "10.89.0.3"), ("10.244.2.0/24", "10.89.0.4")],
        "w1": [("10.244.0.0/24", "10.89.0.2"), ("10.244.2.0/24", "10.89.0.4")],
        "w2": [("10.244.0.0/24", "10.89.0.2"), ("10.244.1.0/24", "10.89.0.3")]}
    ptp, portmap = kind.cni_conflist("10.244.1.0/24")["plugins"]
    assert ptp["type"] == "ptp" and ptp["ipMasq"] is False  # pod to pod keeps its address
    assert ptp["ipam"]["ranges"] == [[{"subnet": "10.244.1.0/24"}]]
    assert portmap == {"type": "portmap", "capabilities": {"portMappings": True}}


def test_each_clusters_ranges_are_its_own_and_apart_from_the_sandboxs() -> None:
    """Clusters side by side (one per host slot) and the sandbox's real nodes (pods in
    10.244.N.0/24, services in 10.96.0.0/16) are all routed from the host: no range of one
    may overlap another's."""
    from goodput_operator.sandbox import cluster, kubeproxy
    taken = [ipaddress.ip_network(kubeproxy.POD_CIDR),
             ipaddress.ip_network(cluster.SERVICE_RANGE)]
    for slot in range(kindhost.SLOTS):
        net = kind.ranges(slot)
        taken += [ipaddress.ip_network(net.pods), ipaddress.ip_network(net.services)]
    assert not [(a, b) for i, a in enumerate(taken) for b in taken[i + 1:] if a.overlaps(b)]
    # 16 nodes' /24s of pods per cluster
    assert len(list(ipaddress.ip_network(kind.ranges(0).pods).subnets(new_prefix=24))) == 16


def test_the_host_reaches_pods_through_their_nodes_and_services_through_the_control_plane(
        ) -> None:
    net = kind.ranges(0)
    nodes = [kind.KindNode("c-control-plane", "10.89.0.2", "10.245.0.0/24", True),
             kind.KindNode("c-worker", "10.89.0.3", "10.245.1.0/24")]
    assert kind.host_routes(nodes, net) == [("10.245.0.0/24", "10.89.0.2"),
                                            ("10.245.1.0/24", "10.89.0.3"),
                                            ("10.97.0.0/20", "10.89.0.2")]


def test_a_cluster_keeps_its_slot_until_released_and_each_takes_the_lowest_free(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(kindhost, "MODULES", tmp_path / "modules")
    monkeypatch.setattr(kindhost, "sysctls", dict)  # the host as it is: not read here
    monkeypatch.setattr(kindhost, "chains", list)
    monkeypatch.setattr(kindhost, "cgroups", list)
    monkeypatch.setattr(kindhost, "HOST_FOLDERS", ())
    monkeypatch.setattr(kindhost, "restore", lambda state: {})
    assert [kindhost.claim("a"), kindhost.claim("b"), kindhost.claim("a")] == [0, 1, 0]
    assert kindhost.release("a") == {}
    assert kindhost.claim("c") == 0 and kindhost.claim("d") == 2
    for name in ("b", "c", "d"):
        kindhost.release(name)
    record = kindhost.record_file().read_text()
    assert '"slots": {}' in record and '"clusters": []' in record


def test_cluster_dns_answers_where_the_kubelets_look_and_runs_off_the_fleet() -> None:
    objects = {o["kind"]: o for o in kind.cluster_dns(kind.ranges(2))}
    service = objects["Service"]
    assert service["metadata"] == {"name": "kube-dns", "namespace": "kube-system",
                                   "labels": {"k8s-app": "kube-dns"}}
    # the tenth address of the cluster's service subnet, as kubeadm gives the kubelets
    assert ipaddress.ip_address(service["spec"]["clusterIP"]) == \
        ipaddress.ip_network("10.97.32.0/20")[10]
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == kind.CONTROL_PLANE
    [container] = pod["containers"]
    assert container["image"] == kindnode.COREDNS_IMAGE
    assert container["imagePullPolicy"] == "Never"
    corefile = objects["ConfigMap"]["data"]["Corefile"]
    plugins = {line.split()[0] for line in corefile.splitlines()[1:] if line.startswith("    ")
               and not line.startswith("        ") and line.split()[0] != "}"}
    # only what the sandbox's CoreDNS build links (versions.COREDNS_PLUGINS)
    from goodput_operator.sandbox.versions import COREDNS_PLUGINS
    assert plugins <= set(COREDNS_PLUGINS)


@pytest.mark.skipif(not build.is_built(KWOK_COMPONENT), reason="kwok is not built here yet")
def test_kwok_runs_from_its_own_manifests_on_the_control_plane_with_the_sandboxs_stages(
        tmp_path: Path) -> None:
    from goodput_operator.sandbox import cluster
    if not Path(cluster.kubectl_binary()).is_file():
        pytest.skip("kubectl is not built here yet")
    objects = kind.kwok_objects(kind.KindCluster("unit-test"))
    kinds = [o["kind"] for o in objects]
    assert {"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Deployment",
            "ConfigMap", "Stage"} <= set(kinds)
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == kind.CONTROL_PLANE
    [container] = pod["containers"]
    assert container["image"] == kindnode.KWOK_IMAGE
    [config] = [o for o in objects if o["kind"] == "ConfigMap"]
    # kwok takes only the fleet's nodes, never a kind node's kubelet
    from goodput_operator.sandbox import fleet
    assert f"manageNodesWithAnnotationSelector: '{fleet.FAKE_NODE_SELECTOR}'" in \
        config["data"]["kwok.yaml"]
    stages = {o["metadata"]["name"] for o in objects if o["kind"] == "Stage"}
    assert {"node-initialize", "node-heartbeat-with-lease", "pod-ready"} <= stages


def test_the_host_record_compares_only_what_the_kernel_does_not_change_itself() -> None:
    for key in ("kernel/random/uuid", "fs/file-nr", "kernel/ns_last_pid",
                "net/netfilter/nf_conntrack_count", "fs/dentry-state"):
        assert kindhost.VOLATILE.match(key), key
    for key in ("kernel/panic", "vm/overcommit_memory", "fs/protected_regular",
                "net/ipv4/ip_forward", "kernel/pid_max", "net/ipv4/conf/all/route_localnet"):
        assert not kindhost.VOLATILE.match(key), key


def test_the_node_image_enables_kinds_units_and_masks_binfmt() -> None:
    assert set(kindnode.ENABLED) == {"kubelet.service", "containerd.service",
                                     "undo-mount-hacks.service"}
    # Debian's packages kind's Dockerfile installs that the cluster's nodes use
    for package in ("systemd", "containerd", "runc", "containernetworking-plugins",
                    "iptables", "conntrack"):
        assert package in kindnode.NODE_PACKAGES


def test_only_podmans_chains_and_cgroups_are_the_clusters_to_remove() -> None:
    for chain in ("NETAVARK_FORWARD", "NETAVARK-1D8721804F16F", "NETAVARK-HOSTPORT-DNAT"):
        assert kindhost.NETAVARK_CHAIN.match(chain)
    # a sandbox's real nodes beside the cluster keep theirs
    for chain in ("KUBE-SERVICES", "KUBE-FIREWALL", "CNI-HOSTPORT-DNAT", "FORWARD"):
        assert not kindhost.NETAVARK_CHAIN.match(chain)
    assert kindhost.PODMAN_CGROUPS == ("libpod_parent",)


def test_sysctls_real_nodes_changed_are_theirs_to_put_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = {"kernel/panic": "10", "vm/overcommit_memory": "1", "kernel/pid_max": "4194304",
           "fs/protected_regular": "2"}
    monkeypatch.setattr(kindhost, "sysctls", lambda: now)
    before = {"kernel/panic": "0", "vm/overcommit_memory": "0", "kernel/pid_max": "32768",
              "fs/protected_regular": "2", "net/ipv4/conf/gone/forwarding": "0"}
    monkeypatch.setattr(kindhost.hostnet, "held_sysctls", lambda: {})
    assert kindhost.changed_sysctls(before) == {"kernel/panic": ("0", "10"),
                                                "vm/overcommit_memory": ("0", "1"),
                                                "kernel/pid_max": ("32768", "4194304")}
    # while real nodes run, the kubelets' keys are restored by their last node, not by kind
    monkeypatch.setattr(kindhost.hostnet, "held_sysctls",
                        lambda: {"kernel/panic": "0", "vm/overcommit_memory": "0"})
    assert kindhost.changed_sysctls(before) == {"kernel/pid_max": ("32768", "4194304")}
