"""Real sandbox nodes, the pure parts: what each node's containerd, kubelet and CNI are told,
what a real node copies from the fleet node it stands in for, and the OCI image packing."""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import re
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from goodput_operator import names
from goodput_operator.sandbox import (
    build,
    cluster,
    fleet,
    hostnet,
    images,
    kubeproxy,
    realnode,
    versions,
)

pytestmark = pytest.mark.unit


def node(slot: int = 3, name: str = "trn2-00-0") -> realnode.RealNode:
    return realnode.RealNode("box", name, slot, 10250 + slot, 10350 + slot,
                             f"/cache/box/real/{name}", {}, {})


def test_each_containerd_is_private_to_its_node_and_never_lowers_oom_score() -> None:
    config = tomllib.loads(realnode.containerd_config(node()))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == images.PAUSE_IMAGE
    assert config["grpc"]["address"] == "/cache/box/real/trn2-00-0/containerd.sock"
    assert config["root"].startswith("/cache/box/real/trn2-00-0/")
    assert config["state"].startswith("/cache/box/real/trn2-00-0/")
    assert cri["containerd"]["runtimes"]["runc"]["options"]["Root"].startswith(
        "/cache/box/real/trn2-00-0/")
    assert cri["cni"]["conf_dir"] == "/cache/box/real/trn2-00-0/cni"


def test_two_nodes_share_no_port_subnet_bridge_or_cgroup() -> None:
    a, b = node(0, "trn2-00-0"), node(1, "trn2-00-1")
    ka, kb = realnode.kubelet_config(a), realnode.kubelet_config(b)
    assert {ka["port"], ka["healthzPort"]}.isdisjoint({kb["port"], kb["healthzPort"]})
    assert ka["cgroupRoot"] != kb["cgroupRoot"]
    ca, cb = realnode.cni_config(a)["plugins"][0], realnode.cni_config(b)["plugins"][0]
    assert ca["bridge"] != cb["bridge"]
    assert ca["ipam"]["ranges"][0][0]["subnet"] == "10.244.0.0/24"
    assert cb["ipam"]["ranges"][0][0]["subnet"] == "10.244.1.0/24"
    assert ca["ipMasq"] is False, "pods must see each other's real addresses"


def test_the_kubelet_settings_that_the_traps_need() -> None:
    config = realnode.kubelet_config(node(7))
    assert config["oomScoreAdj"] == 0 and config["failCgroupV1"] is False
    assert config["clusterDNS"] == ["10.244.7.1"], "CoreDNS answers on the node's bridge"
    assert config["imageGCHighThresholdPercent"] == 100, "imported images cannot be pulled"
    assert config["containerRuntimeEndpoint"] == "unix:///cache/box/real/trn2-00-0/containerd.sock"


def test_cluster_dns_uses_only_the_plugins_its_coredns_is_built_with() -> None:
    text = realnode.corefile(["10.244.0.1", "10.244.1.1"], Path("/cache/box/kubeconfig"))
    depth, directives = 0, set()
    for line in text.splitlines():
        words = line.split()
        if depth == 1 and words and words[0] != "}":
            directives.add(words[0])
        depth += line.count("{") - line.count("}")
    assert directives == set(versions.COREDNS_PLUGINS)
    assert "bind 10.244.0.1 10.244.1.1" in text
    main = versions.COREDNS_COMPONENT.main_go or ""
    imported = set(re.findall(r'"github.com/coredns/coredns/plugin/([a-z0-9]+)"', main))
    assert imported == set(versions.COREDNS_PLUGINS), "a Corefile directive without its plugin"


def test_a_real_node_copies_its_fleet_twin_but_not_the_kwok_marks() -> None:
    twin = fleet.nodes(fleet.load("trn2"))[0]
    labels, extended = realnode.stand_in(twin)
    assert labels["topology.k8s.aws/ultraserver-id"] == \
        twin["metadata"]["labels"]["topology.k8s.aws/ultraserver-id"]
    assert labels[realnode.REAL_LABEL] == "true" and "type" not in labels
    assert extended == {"aws.amazon.com/neuron": "16", "aws.amazon.com/neuroncore": "128",
                        "vpc.amazonaws.com/efa": "16"}


def test_a_packed_image_is_an_oci_layout_whose_digests_hold(tmp_path: Path) -> None:
    layer = images._files_layer(tmp_path / "layer.tar",
                                {"opt/app/run.py": (b"print('hi')\n", 0o755)})
    archive = images.pack(tmp_path / "image.tar", "goodput.dev/x:1", [layer],
                          {"Cmd": ["python3"]})
    with tarfile.open(archive) as tar:
        blobs = {m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
                 for m in tar.getmembers() if m.isfile()}
    index = json.loads(blobs["index.json"])
    entry = index["manifests"][0]
    assert entry["annotations"]["io.containerd.image.name"] == "goodput.dev/x:1"
    manifest_blob = blobs[f"blobs/sha256/{entry['digest'][7:]}"]
    assert hashlib.sha256(manifest_blob).hexdigest() == entry["digest"][7:]
    manifest = json.loads(manifest_blob)
    config = json.loads(blobs[f"blobs/sha256/{manifest['config']['digest'][7:]}"])
    layer_digest = manifest["layers"][0]["digest"]
    assert config["rootfs"]["diff_ids"] == [layer_digest]
    assert len(config["history"]) == 1, "one history entry per layer (buildah checks)"
    assert hashlib.sha256(blobs[f"blobs/sha256/{layer_digest[7:]}"]).hexdigest() == \
        layer_digest[7:]
    with tarfile.open(layer) as tar:
        assert tar.getnames() == ["opt", "opt/app", "opt/app/run.py"]
        assert tar.getmember("opt/app/run.py").mode == 0o755


@pytest.mark.parametrize(("text", "expected"), [
    ("Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n",
     "http://mirror.example/debian"),
    ("deb [signed-by=/k.gpg] http://deb.example/debian/ bookworm main\n",
     "http://deb.example/debian"),
    ("deb http://security.example/debian-security bookworm-security main\n",
     "http://deb.debian.org/debian"),
])
def test_debootstrap_asks_the_mirror_apt_uses(tmp_path: Path, text: str, expected: str) -> None:
    (tmp_path / "sources.list").write_text(text)
    mirror, _ = images.debian_source([tmp_path / "sources.list"])
    assert mirror == expected


def test_the_worker_image_carries_the_sdk_and_the_example_trainer() -> None:
    files = images.app_files()
    assert f"{images.SDK_DIR}/sdk/checkpoint.py" in files
    assert f"{images.TRAINER_DIR}/train.py" in files
    assert f"{images.SDK_DIR}/probe/__main__.py" in files, "probe Jobs run from this image"
    assert files[f"{images.SDK_DIR}/__init__.py"][0].startswith(b'"""Goodput Operator')


def is_module(dotted: str) -> bool:
    path = images.PACKAGE_ROOT.joinpath(*dotted.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_the_worker_images_modules_import_only_each_other() -> None:
    """What the image carries must run without the rest of the package (a worker has no
    kopf, pydantic or kubernetes client): every goodput_operator import it makes, at
    module level or inside a function, is a module it carries."""
    carried = {"goodput_operator." + name.removesuffix(".py").removesuffix("/__init__")
               .replace("/", ".") for name in images.IMAGE_MODULES}
    carried = {m.removesuffix(".__init__") for m in carried} | {"goodput_operator"}
    missing = set()
    for name in images.IMAGE_MODULES:
        tree = ast.parse((images.PACKAGE_ROOT / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "goodput_operator"):
                module = node.module or ""
                for alias in node.names:  # a module of the package, or an object of MODULE
                    target = f"{module}.{alias.name}"
                    needed = target if is_module(target) else module
                    if needed not in carried:
                        missing.add(f"{name}: from {module} import {alias.name}")
            elif isinstance(node, ast.Import):
                missing.update(f"{name}: import {alias.name}" for alias in node.names
                               if alias.name.startswith("goodput_operator")
                               and alias.name not in carried)
    assert not missing, sorted(missing)


def test_the_example_trainer_manifest_runs_the_image_the_sandbox_builds() -> None:

    root = Path(__file__).resolve().parents[2]
    job = yaml.safe_load((root / "examples" / "trn2" / "trainingjob-trainer.yaml").read_text())
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == images.WORKER_IMAGE
    assert container["imagePullPolicy"] == "Never"
    assert container["command"][1] == f"/{images.TRAINER_DIR}/train.py"
    volume = job["spec"]["template"]["spec"]["volumes"][0]
    assert volume["hostPath"]["path"] == str(realnode.SHARED_DIR)


@pytest.mark.parametrize(("ready", "taints", "expected"), [
    ("True", [], True),
    ("True", [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}], False),
    ("True", [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}], False),
    ("True", [{"key": names.QUARANTINE_TAINT, "effect": "NoSchedule"}], True),
    ("Unknown", [], False),
])
def test_a_healed_node_has_recovered_once_the_lifecycle_taints_are_gone(
        ready: str, taints: list[dict[str, str]], expected: bool) -> None:
    from goodput_operator.sandbox import faults

    node = {"spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}
    assert faults.recovered(node) is expected


def _kwokctl_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_nodes: int,
                    simulated: int = 16) -> str:
    """The sandbox's kwokctl configuration and stage documents; each stage names its file."""
    for stage in cluster.STAGE_FILES:  # kwok's stage files, as the module cache holds them
        (tmp_path / stage).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / stage).write_text(f"kind: Stage\nmetadata: {{name: {stage}}}\n")
    monkeypatch.setattr(build, "module_dir", lambda component: tmp_path)
    monkeypatch.setattr(hostnet, "host_ip", lambda: "192.0.2.7")
    binaries = {name: tmp_path / name for name in (
        "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "etcd", "kwok")}
    return cluster.Sandbox("t").kwokctl_config(binaries, real_nodes, simulated)


def _kwokctl_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_nodes: int,
                     simulated: int = 16) -> tuple[dict[str, object], list[dict[str, object]]]:
    """(options, kube-apiserver extra args) of the sandbox's kwokctl configuration."""

    config = next(yaml.safe_load_all(_kwokctl_config(tmp_path, monkeypatch, real_nodes,
                                                     simulated)))
    apiserver = next(p for p in config["componentsPatches"] if p["name"] == "kube-apiserver")
    return config["options"], apiserver["extraArgs"]


def test_with_real_nodes_pods_reach_the_api_server_through_its_service(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    options, args = _kwokctl_options(tmp_path, monkeypatch, real_nodes=1)
    assert {"key": "bind-address", "value": "0.0.0.0", "override": True} in args
    assert options["kubeApiserverCertSANs"] == ["10.96.0.1", "192.0.2.7"]
    options, args = _kwokctl_options(tmp_path, monkeypatch, real_nodes=0)
    assert "kubeApiserverCertSANs" not in options, "simulated only: loopback, as before"
    assert not any(a["key"] == "bind-address" for a in args)


@pytest.mark.parametrize(("real", "simulated", "factor", "heartbeats"), [
    (0, 2_000, None, True),  # kwokctl's default (5)
    (0, cluster.HEARTBEAT_NODES, None, True),
    (0, 20_000, None, False),  # no Lease renewals at all; a week's grace
    (2, 20_000, 1, True),  # real kubelets: Kubernetes' own timing, whatever the fleet
])
def test_a_large_simulated_fleet_has_no_heartbeats_and_a_long_grace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real: int, simulated: int,
        factor: float | None, heartbeats: bool) -> None:
    options, _ = _kwokctl_options(tmp_path, monkeypatch, real, simulated)
    assert options.get("heartbeatFactor") == factor
    grace = options.get("kubeControllerManagerNodeMonitorGracePeriodMilliseconds")
    assert (grace == cluster.QUIET_GRACE_MS) is (not heartbeats)
    stream = _kwokctl_config(tmp_path, monkeypatch, real, simulated)
    assert (f"name: {cluster.HEARTBEAT_STAGE}" in stream) is heartbeats
    config, *rest = yaml.safe_load_all(stream)
    kwok = next(p for p in config["componentsPatches"] if p["name"] == "kwok-controller")
    no_leases = {"key": "node-lease-duration-seconds", "value": "0", "override": True}
    assert (no_leases in kwok["extraArgs"]) is (not heartbeats)
    workers = [d["options"] for d in rest if d.get("kind") == "KwokConfiguration"]
    assert workers == ([] if heartbeats else [{
        "nodePlayStageParallelism": cluster.QUIET_PARALLELISM,
        "podPlayStageParallelism": cluster.QUIET_PARALLELISM}])


def test_a_system_node_has_no_accelerators_and_says_what_it_is_for() -> None:
    labels, extended = realnode.stand_in(cluster.system_node("system-0"))
    assert labels[realnode.SYSTEM_LABEL] == "true" and labels[realnode.REAL_LABEL] == "true"
    assert "node-role.kubernetes.io/system" in labels
    assert "node.kubernetes.io/instance-type" not in labels, "no group selects it"
    assert extended == {}


def test_kube_proxy_leaves_the_host_conntrack_and_localhost_alone() -> None:
    command = kubeproxy.command(Path("/k/kubeconfig"), "trn2-00-0", 10249, 10256)
    for flag in ("--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0",
                 "--conntrack-tcp-timeout-close-wait=0", "--iptables-localhost-nodeports=false",
                 "--nodeport-addresses=primary", "--oom-score-adj=0",
                 "--metrics-bind-address=127.0.0.1:10249",
                 "--healthz-bind-address=127.0.0.1:10256"):
        assert flag in command
    assert command[command.index("--hostname-override") + 1] == "trn2-00-0"
    assert command[command.index("--cluster-cidr") + 1] == "10.244.0.0/16"
    assert all(hostnet.subnet(slot).startswith("10.244.") for slot in (0, 249))


def test_a_sandbox_name_too_long_for_the_kubelets_sockets_is_refused_with_the_reason() -> None:
    assert realnode.path_too_long(Path("/root/.cache/goodput-operator/sandboxes/demo"),
                                  "trn2-00-0") is None
    problem = realnode.path_too_long(Path("/root/.cache/goodput-operator/sandboxes/"
                                          "goodput-bench-failover"), "system-0")
    assert problem and "107 bytes" in problem and "shorter sandbox name" in problem


def test_one_kube_proxy_per_host_and_only_its_owner_removes_its_rules(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setenv("GOODPUT_CACHE", str(tmp_path))
    alive, dead = tmp_path / "a.pid", tmp_path / "dead.pid"
    alive.write_text(str(os.getpid()))
    dead.write_text("999999999")
    assert hostnet.claim_proxy("a", alive) is None
    assert hostnet.claim_proxy("b", tmp_path / "b.pid") == "a", "a's kube-proxy runs"
    assert hostnet.release_proxy("b") is False, "b never had it: it must not clean up a's"
    assert hostnet.proxy_holder() == "a"
    assert hostnet.release_proxy("a") is True and hostnet.proxy_holder() is None
    assert hostnet.claim_proxy("c", dead) is None
    assert hostnet.claim_proxy("d", alive) is None, "c's kube-proxy died without `down`"


def test_a_sandbox_for_the_upstream_gang_peer_turns_its_alpha_gates_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    options, _ = _kwokctl_options(tmp_path, monkeypatch, real_nodes=0)
    assert "kubeFeatureGates" not in options and "kubeRuntimeConfig" not in options
    monkeypatch.setattr(cluster, "Sandbox", functools.partial(cluster.Sandbox,
                                                              upstream_gang=True))
    options, _ = _kwokctl_options(tmp_path, monkeypatch, real_nodes=0)
    assert "GangScheduling=true" in str(options["kubeFeatureGates"])
    assert "TopologyAwareWorkloadScheduling=true" in str(options["kubeFeatureGates"])
    assert options["kubeRuntimeConfig"] == "scheduling.k8s.io/v1alpha2=true"
