"""The kind node image, assembled on this machine with no registry (shared/design/KIND.md).

`kind build node-image` fetches etcd, CoreDNS, pause, kindnetd and the storage images from
registries even when they are present, so the image is made here instead, doing what that
command and kind's `images/base/Dockerfile` do:

- a Debian root (``debootstrap`` minbase, the packages kind's base image installs that this
  cluster uses: systemd, containerd, runc, the CNI plugins, iptables, conntrack...) with the
  Dockerfile's systemd clean-ups;
- kind's own `images/base/files` (entrypoint, units, kubelet drop-ins, containerd's
  configuration), read from the kind module in Go's cache, never copied into this repo;
- kubeadm, kubelet and kubectl from the sandbox's Kubernetes build, crictl, `/kind/version`;
- the images every node runs, preloaded into its `/var/lib/containerd` under the names
  kubeadm asks for (`kubeadm config images list`): the control plane from the same binaries
  the sandbox runs, etcd, pause, kube-proxy (with Debian's iptables), and the cluster's own
  services (CoreDNS, the kwok controller, the storage provisioner and its helper). A
  throwaway containerd (its own root, state and socket; CRI off) imports them.

The result is imported into the project's private Podman storage under a name that changes
with its content (`localhost/goodput/kind-node:<key>`), so a second `goodput kind up` with
nothing changed reuses it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from goodput_operator.sandbox import build, images
from goodput_operator.sandbox.versions import (
    COREDNS,
    COREDNS_COMPONENT,
    CRICTL_COMPONENT,
    ETCD_COMPONENT,
    KIND_COMPONENT,
    KUBEADM_COMPONENT,
    KUBERNETES,
    KUBERNETES_COMPONENT,
    KWOK,
    KWOK_COMPONENT,
    LOCAL_PATH,
    LOCAL_PATH_COMPONENT,
)

# kind's base image packages that a node of this cluster needs (nfs, iscsi and the storage
# e2e tools are left out: no test here mounts network storage)
NODE_PACKAGES = ("systemd", "dbus", "containerd", "runc", "containernetworking-plugins",
                 "conntrack", "iptables", "nftables", "iproute2", "ethtool", "util-linux",
                 "mount", "kmod", "libseccomp2", "pigz", "bash", "ca-certificates", "procps",
                 "jq")
# kube-proxy programs Services with iptables; the helper of the storage provisioner runs sh
PROXY_PACKAGES = ("iptables", "conntrack", "ipset")
RECIPE = 2  # bump when the assembly below changes what the image holds
KWOK_IMAGE = f"goodput.dev/kwok:{KWOK}"
COREDNS_IMAGE = f"goodput.dev/coredns:{COREDNS}"
LOCAL_PATH_IMAGE = f"goodput.dev/local-path-provisioner:{LOCAL_PATH}"
HELPER_IMAGE = "goodput.dev/local-path-helper:debian"
PAUSE_TAG = "registry.k8s.io/pause:3.10"  # kind's containerd config names this sandbox image
Progress = build.Progress
ENTRYPOINT = 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]'  # kind's base image's
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class NodeImage:
    name: str  # as Podman knows it
    key: str


def kind_files() -> Path:
    """kind's `images/base/files`, in the kind module that `goodput kind up` builds."""
    return build.module_dir(KIND_COMPONENT) / "images" / "base" / "files"


def storage_manifest() -> str:
    """kind's default StorageClass (local-path-provisioner, its manifest as kind's node image
    carries it, read from the kind module), with the provisioner and helper built here."""
    source = (build.module_dir(KIND_COMPONENT) / "pkg" / "build" / "nodeimage" /
              "const_storage.go").read_text()
    start = "const defaultStorageManifest = `"
    body = source[source.index(start) + len(start):]
    body = body.replace("` + storageProvisionerImage + `", LOCAL_PATH_IMAGE)
    body = body.replace("` + storageHelperImage + `", HELPER_IMAGE)
    return body[:body.index("`")]


def kubeadm_images(kubeadm: Path) -> dict[str, str]:
    """What kubeadm pulls for this Kubernetes, by component (`kube-apiserver`: its name)."""
    proc = subprocess.run([str(kubeadm), "config", "images", "list", "--kubernetes-version",
                           KUBERNETES], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise images.ImageError(f"kubeadm config images list failed: {proc.stderr.strip()}")
    return {line.rsplit("/", 1)[-1].split(":", 1)[0]: line.strip()
            for line in proc.stdout.splitlines() if line.strip()}


def _binary_image(folder: Path, name: str, binary: Path, base: Sequence[Path] = (),
                  entrypoint: Sequence[str] = ()) -> images.Image:
    """NAME: BINARY at /usr/local/bin on the BASE layers (none: the binary alone)."""
    archive = folder / f"{name.replace('/', '_').replace(':', '_')}.tar"
    if not archive.is_file():
        layer = images._files_layer(
            folder / f"{binary.name}.layer.tar",
            {f"usr/local/bin/{binary.name}": (binary.read_bytes(), 0o755)})
        config: dict[str, Any] = {"Env": [PATH_ENV]}
        if entrypoint:
            config["Entrypoint"] = list(entrypoint)
        images.pack(archive, name, [*base, layer], config)
    return images.Image(name, archive)


def node_layer(progress: Progress = build.print_progress) -> Path:
    """The node image's Debian root (debootstrap: NODE_PACKAGES), built once and cached."""
    return images.debian_layer(NODE_PACKAGES, "the kind node image", progress=progress)


def proxy_layer(progress: Progress = build.print_progress) -> Path:
    """kube-proxy's Debian base (PROXY_PACKAGES), built once and cached."""
    return images.debian_layer(PROXY_PACKAGES, "kube-proxy's image", progress=progress)


def node_images(binaries: dict[str, Path], progress: Progress) -> list[images.Image]:
    """Every image a node preloads, under the names its pods ask for."""
    wanted = kubeadm_images(binaries["kubeadm"])
    folder = images.images_dir() / "kind" / images._key(
        KUBERNETES, sorted(wanted.items()), *(images.digest_of(binaries[b]) for b in (
            "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy",
            "etcd", "coredns", "kwok", "local-path-provisioner")))
    folder.mkdir(parents=True, exist_ok=True)
    proxy_base = proxy_layer(progress)
    found = [_binary_image(folder, wanted[c], binaries[c]) for c in (
        "kube-apiserver", "kube-controller-manager", "kube-scheduler")]
    found.append(_binary_image(folder, wanted["kube-proxy"], binaries["kube-proxy"],
                               base=[proxy_base]))
    found.append(_binary_image(folder, wanted["etcd"], binaries["etcd"]))
    found.append(_binary_image(folder, COREDNS_IMAGE, binaries["coredns"],
                               entrypoint=["/usr/local/bin/coredns"]))
    found.append(_binary_image(folder, KWOK_IMAGE, binaries["kwok"],
                               entrypoint=["/usr/local/bin/kwok"]))
    found.append(_binary_image(folder, LOCAL_PATH_IMAGE, binaries["local-path-provisioner"],
                               base=[proxy_base]))
    helper = folder / "helper.tar"
    if not helper.is_file():
        images.pack(helper, HELPER_IMAGE, [proxy_base], {"Env": [PATH_ENV]})
    found.append(images.Image(HELPER_IMAGE, helper))
    pause = images.pause_image(progress)
    for tag in sorted({PAUSE_TAG, wanted["pause"]}):
        archive = folder / f"pause-{tag.rsplit(':', 1)[-1]}.tar"
        if not archive.is_file():
            with tarfile.open(pause.archive) as source:
                index = json.load(source.extractfile("index.json"))  # type: ignore[arg-type]
            _retag(pause.archive, archive, index, tag)
        found.append(images.Image(tag, archive))
    return found


def _retag(source: Path, target: Path, index: dict[str, Any], name: str) -> None:
    """A copy of the OCI archive SOURCE whose index names the image NAME."""
    for manifest in index["manifests"]:
        manifest["annotations"] = {"io.containerd.image.name": name,
                                   "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]}
    partial = target.with_name(target.name + ".partial")
    with tarfile.open(source) as src, tarfile.open(partial, "w") as out:
        for member in src.getmembers():
            if member.name == "index.json":
                images._add_bytes(out, "index.json", json.dumps(index).encode())
            else:
                out.addfile(member, src.extractfile(member) if member.isfile() else None)
    partial.rename(target)


def preload(store: Path, found: Sequence[images.Image], progress: Progress) -> None:
    """FOUND imported into a containerd root at STORE (a node's /var/lib/containerd), by a
    throwaway containerd: its own state and socket, the CRI plugin off, pinned as kind's
    preloaded images are so the kubelet's image GC keeps them."""
    work = Path(tempfile.mkdtemp(prefix="goodput-preload-"))  # a socket path is short
    socket = work / "containerd.sock"
    config = work / "config.toml"
    config.write_text('version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
                      f'root = "{store}"\nstate = "{work / "state"}"\n'
                      f'[grpc]\n  address = "{socket}"\n'
                      # its default is /opt/containerd on the host
                      f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{work / "opt"}"\n')
    log = (work / "containerd.log").open("w")
    daemon = subprocess.Popen(["containerd", "--config", str(config)], stdout=log,
                              stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise images.ImageError(f"the preload containerd did not start: see {log.name}")
            time.sleep(0.1)
        ctr = ["ctr", "--address", str(socket), "-n", "k8s.io"]
        for image in found:
            progress(f"  preloading {image.name}")
            proc = subprocess.run([*ctr, "images", "import", "--no-unpack", str(image.archive)],
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise images.ImageError(f"preloading {image.name}: {proc.stderr.strip()}")
            subprocess.run([*ctr, "images", "label", image.name,
                            "io.cri-containerd.pinned=pinned"], capture_output=True, check=False)
    finally:
        daemon.terminate()
        daemon.wait(30)
        log.close()
    shutil.rmtree(work, ignore_errors=True)


def cri_base_spec() -> dict[str, Any]:
    """kind's /etc/containerd/cri-base.json: containerd's default OCI spec with kind's
    product-files hook and no rlimits (as its Dockerfile makes it with `ctr oci spec`)."""
    proc = subprocess.run(["ctr", "oci", "spec"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise images.ImageError(f"ctr oci spec failed: {proc.stderr.strip()}")
    spec: dict[str, Any] = json.loads(proc.stdout)
    hooks = spec.setdefault("hooks", {}).setdefault("createContainer", [])
    hooks.append({"path": "/kind/bin/mount-product-files.sh"})
    spec.get("process", {}).pop("rlimits", None)
    return spec


# the Dockerfile's clean-ups: units a container's systemd must not start (relative to root)
UNWANTED = ("lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service",
            "lib/systemd/system/multi-user.target.wants/*", "etc/systemd/system/*.wants/*",
            "lib/systemd/system/local-fs.target.wants/*",
            "lib/systemd/system/sockets.target.wants/*udev*",
            "lib/systemd/system/sockets.target.wants/*initctl*",
            "lib/systemd/system/basic.target.wants/*")
ENABLED = ("kubelet.service", "containerd.service", "undo-mount-hacks.service")


def assemble(root: Path, binaries: dict[str, Path], found: Sequence[images.Image],
             progress: Progress) -> None:
    """The node's root file system at ROOT (the Debian layer already extracted there)."""
    for pattern in UNWANTED:
        for path in root.glob(pattern):
            path.unlink()
    with (root / "etc/systemd/journald.conf").open("a") as journald:
        journald.write("ReadKMsg=no\n")
    _link(root / "sbin/init", "/usr/lib/systemd/systemd")
    files = kind_files()
    for source in sorted(p for p in files.rglob("*") if p.is_file()):
        relative = source.relative_to(files)
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        executable = relative.parts[:3] == ("usr", "local", "bin") or \
            relative.parts[:2] == ("kind", "bin")
        target.chmod(0o755 if executable else 0o644)
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    for unit in ENABLED:
        _link(wants / unit, f"/etc/systemd/system/{unit}")
    _link(root / "etc/systemd/system/systemd-binfmt.service", "/dev/null")
    (root / "etc/kubernetes/manifests").mkdir(parents=True, exist_ok=True)
    # kind's units run its own builds from /usr/local; Debian's live in /usr/bin and /usr/lib
    _link(root / "usr/local/bin/containerd", "/usr/bin/containerd")
    cni = root / "opt/cni/bin"
    cni.mkdir(parents=True, exist_ok=True)
    for plugin in sorted((root / "usr/lib/cni").iterdir()):
        _link(cni / plugin.name, f"/usr/lib/cni/{plugin.name}")
    (root / "etc/containerd/cri-base.json").write_text(json.dumps(cri_base_spec(), indent=1))
    for name in ("kubeadm", "kubelet", "kubectl"):
        shutil.copyfile(binaries[name], root / "usr/bin" / name)
        (root / "usr/bin" / name).chmod(0o755)
    shutil.copyfile(binaries["crictl"], root / "usr/local/bin/crictl")
    (root / "usr/local/bin/crictl").chmod(0o755)
    (root / "kind/manifests").mkdir(parents=True, exist_ok=True)
    (root / "kind/version").write_text(KUBERNETES)
    (root / "kind/manifests/default-storage.yaml").write_text(storage_manifest())
    store = root / "var/lib/containerd"
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir(parents=True)
    preload(store, found, progress)


def _link(path: Path, target: str) -> None:
    path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


COMPONENTS = (KUBERNETES_COMPONENT, ETCD_COMPONENT, KWOK_COMPONENT, COREDNS_COMPONENT,
              KUBEADM_COMPONENT, CRICTL_COMPONENT, LOCAL_PATH_COMPONENT)


def node_image(podman: Callable[..., subprocess.CompletedProcess[str]],
               progress: Progress = build.print_progress) -> NodeImage:
    """The node image, built once per content and imported into Podman (PODMAN: runs
    `podman` on the project's private storage)."""
    binaries = build.ensure_all(COMPONENTS, progress)
    layer = node_layer(progress)
    found = node_images(binaries, progress)
    inputs = [RECIPE, images.digest_of(layer), sorted(
        (n, images.digest_of(p)) for n, p in binaries.items()
        if n in ("kubeadm", "kubelet", "kubectl", "crictl")),
        [(i.name, images.digest_of(i.archive)) for i in found],
        sorted((str(p.relative_to(kind_files())), p.read_bytes())
               for p in kind_files().rglob("*") if p.is_file())]
    key = images._key(*inputs)
    name = f"localhost/goodput/kind-node:{key}"
    if podman("image", "exists", name).returncode == 0:
        return NodeImage(name, key)
    with build._locked(images.images_dir() / "locks" / "kind-node.lock"):
        if podman("image", "exists", name).returncode == 0:  # another caller made it
            return NodeImage(name, key)
        started = time.monotonic()
        progress(f"Assembling the kind node image {name} (first time only, about 2 min)...")
        work = images.images_dir() / "kind" / f"node-{key}"
        root = work / "rootfs"
        shutil.rmtree(work, ignore_errors=True)
        root.mkdir(parents=True)
        _tar("-xf", str(layer), "-C", str(root))
        assemble(root, binaries, found, progress)
        archive = work / "rootfs.tar"
        _tar("-cf", str(archive), "-C", str(root), ".")
        shutil.rmtree(root)
        proc = podman("import", "--change", ENTRYPOINT, "--change", "ENV container=docker",
                      "--change", "STOPSIGNAL SIGRTMIN+3", str(archive), name)
        if proc.returncode != 0:
            raise images.ImageError(f"podman import of the node image failed: "
                                    f"{proc.stderr.strip()}")
        shutil.rmtree(work)
        progress(f"Assembled {name} in {time.monotonic() - started:.0f}s")
        return NodeImage(name, key)


def _tar(*args: str) -> None:
    proc = subprocess.run(["tar", "--numeric-owner", *args], capture_output=True, text=True,
                          check=False, env={**os.environ, "LC_ALL": "C"})
    if proc.returncode != 0:
        raise images.ImageError(f"tar {' '.join(args[:2])} failed: {proc.stderr.strip()}")
