"""Container images for real sandbox nodes, built without a registry or a container engine.

Two images, cached per content under ``<cache>/images``:
- the pause image (the pod sandbox's first process): a static Go program, one layer;
- the worker image: a Debian root file system made by ``debootstrap`` from the mirror apt
  is configured with (python3, numpy, PyTorch CPU), plus a small layer with the project's
  SDK and the example trainer. The Debian layer is built once (minutes) and reused while the
  package list stays the same; the SDK layer is rebuilt in a second when the SDK changes.

Each image is packed as an OCI image layout in a tar (stdlib only: config, manifest,
``index.json`` naming the image) and imported into each real node's containerd with
``ctr images import``; pods use them with ``imagePullPolicy: Never``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from goodput_operator import __version__
from goodput_operator.sandbox import build

PAUSE_SOURCE = Path(__file__).parent / "pause" / "pause.go"
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # src/goodput_operator
TRAINER_SOURCE = Path(__file__).resolve().parents[3] / "examples" / "trainer"
SERVER_SOURCE = TRAINER_SOURCE.parent / "server"  # the toy model server
# Debian's packages for the worker: PyTorch 1.13 (CPU) with gloo, numpy, python 3.11
WORKER_PACKAGES = ("python3-minimal", "python3-numpy", "python3-torch")
PAUSE_IMAGE = f"goodput.dev/pause:{__version__}"
WORKER_IMAGE = f"goodput.dev/worker:{__version__}"
SDK_DIR = "usr/lib/python3/dist-packages/goodput_operator"
TRAINER_DIR = "opt/goodput/trainer"
SERVER_DIR = "opt/goodput/server"
# trimmed from the root file system: documentation, caches, package lists
TRIM = ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
        "usr/share/info", "usr/share/locale", "var/log")
TRIM_VERSION = 1  # bump when TRIM or the base layer's recipe changes
LAYER = "application/vnd.oci.image.layer.v1.tar"
Progress = build.Progress


class ImageError(RuntimeError):
    """An image could not be built or imported; the message says why and what to do."""


@dataclass(frozen=True)
class Image:
    name: str
    archive: Path  # an OCI image layout packed as a tar, ready for `ctr images import`


def images_dir() -> Path:
    return build.cache_root() / "images"


def debian_source(sources: Iterable[Path] = (Path("/etc/apt/sources.list"),
                                             Path("/etc/apt/sources.list.d"))) -> tuple[str, str]:
    """(mirror, suite) of the Debian archive apt uses here: debootstrap asks the same one."""
    suite = "bookworm"
    release = Path("/etc/os-release")
    if release.is_file():
        found = re.search(r"^VERSION_CODENAME=(\w+)", release.read_text(), re.MULTILINE)
        suite = found[1] if found else suite
    texts: list[str] = []
    for source in sources:
        files = sorted(source.glob("*.sources")) + sorted(source.glob("*.list")) \
            if source.is_dir() else [source]
        texts += [f.read_text() for f in files if f.is_file()]
    for text in texts:
        for uri in re.findall(r"(?:^URIs:|^deb)\s+(?:\[[^]]*\]\s+)?(https?://\S+)", text,
                              re.MULTILINE):
            if uri.rstrip("/").endswith("/debian"):
                return uri.rstrip("/"), suite
    return "http://deb.debian.org/debian", suite


def digest_of(path: Path) -> str:
    """sha256 of a file, remembered beside it (layers are large and never change)."""
    memo = path.with_name(path.name + ".sha256")
    if memo.is_file() and memo.stat().st_mtime >= path.stat().st_mtime:
        return memo.read_text().strip()
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 22):
            sha.update(chunk)
    digest = f"sha256:{sha.hexdigest()}"
    memo.write_text(digest)
    return digest


def pack(archive: Path, name: str, layers: Sequence[Path], config: dict[str, Any]) -> Path:
    """Write an OCI image layout tar: the layers (uncompressed tars), the image config, the
    manifest and an index whose annotation names the image for containerd."""
    diff_ids = [digest_of(layer) for layer in layers]
    image_config = {"architecture": "amd64", "os": "linux", "config": config,
                    "rootfs": {"type": "layers", "diff_ids": diff_ids},
                    # one entry per layer: builders (buildah) check the two agree
                    "history": [{"created": "1970-01-01T00:00:00Z",
                                 "created_by": f"goodput sandbox: {layer.parent.name}"}
                                for layer in layers]}
    config_blob = json.dumps(image_config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": _sha(config_blob), "size": len(config_blob)},
        "layers": [{"mediaType": LAYER, "digest": d, "size": layer.stat().st_size}
                   for d, layer in zip(diff_ids, layers, strict=True)],
    }
    manifest_blob = json.dumps(manifest, sort_keys=True).encode()
    index = {"schemaVersion": 2, "manifests": [{
        "mediaType": manifest["mediaType"], "digest": _sha(manifest_blob),
        "size": len(manifest_blob), "platform": {"architecture": "amd64", "os": "linux"},
        "annotations": {"io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]}}]}
    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, "w") as out:
        _add_bytes(out, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add_bytes(out, "index.json", json.dumps(index).encode())
        _add_bytes(out, f"blobs/sha256/{_sha(config_blob)[7:]}", config_blob)
        _add_bytes(out, f"blobs/sha256/{_sha(manifest_blob)[7:]}", manifest_blob)
        for digest, layer in zip(diff_ids, layers, strict=True):
            out.add(layer, arcname=f"blobs/sha256/{digest[7:]}")
    partial.rename(archive)
    return archive


def _sha(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _add_bytes(out: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    out.addfile(info, io.BytesIO(data))


def _files_layer(path: Path, files: dict[str, tuple[bytes, int]],
                 links: dict[str, str] | None = None) -> Path:
    """A layer of the given files (archive path -> content, mode) and symbolic links
    (archive path -> target), parents included."""
    links = links or {}
    directories = sorted({str(Path(name).parents[i]) for name in [*files, *links]
                          for i in range(len(Path(name).parents) - 1)})
    with tarfile.open(path, "w") as out:
        for directory in directories:
            info = tarfile.TarInfo(directory)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            out.addfile(info)
        for name, (data, mode) in sorted(files.items()):
            _add_bytes(out, name, data, mode)
        for name, target in sorted(links.items()):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, target, 0o777, 0
            out.addfile(info)
    return path


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:16]


def pause_image(progress: Progress = build.print_progress) -> Image:
    source = PAUSE_SOURCE.read_bytes()
    folder = images_dir() / f"pause-{_key(source, build.find_go())}"
    archive = folder / "image.tar"
    with build._locked(images_dir() / "locks" / "pause.lock"):
        if archive.is_file():
            return Image(PAUSE_IMAGE, archive)
        progress("Building the pause image (a static Go program)...")
        work = folder / "src"
        work.mkdir(parents=True, exist_ok=True)
        (work / "go.mod").write_text("module goodput.dev/sandbox/pause\n\ngo 1.26\n")
        (work / "pause.go").write_bytes(source)
        env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local"}
        proc = subprocess.run([build.find_go(), "build", "-trimpath", "-ldflags", "-s -w",
                               "-o", str(folder / "pause"), "."], cwd=work, env=env,
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ImageError(f"building the pause program failed: {proc.stderr.strip()}")
        layer = _files_layer(folder / "layer.tar",
                             {"pause": ((folder / "pause").read_bytes(), 0o755)})
        pack(archive, PAUSE_IMAGE, [layer], {"Entrypoint": ["/pause"]})
        return Image(PAUSE_IMAGE, archive)


def base_layer(progress: Progress = build.print_progress) -> Path:
    """The Debian root file system of the worker image as one layer (built once)."""
    return debian_layer(WORKER_PACKAGES, "the worker image", progress=progress)


def debian_layer(packages: Sequence[str], purpose: str, remove: Sequence[str] = (),
                 progress: Progress = build.print_progress) -> Path:
    """A Debian minbase root file system with PACKAGES, trimmed (TRIM, then REMOVE: paths
    relative to the root), as one uncompressed layer; built once per recipe and cached."""
    mirror, suite = debian_source()
    recipe: tuple[object, ...] = (mirror, tuple(packages), TRIM_VERSION)
    key = _key(*recipe, *remove) if remove else _key(*recipe)
    folder = images_dir() / f"debian-{suite}-{key}"
    layer = folder / "layer.tar"
    with build._locked(images_dir() / "locks" / f"debian-{key}.lock"):
        if layer.is_file():
            return layer
        debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
        if not Path(debootstrap).is_file():
            raise ImageError("debootstrap is not installed: run scripts/install-real-node-deps.sh "
                             "(or `apt-get install debootstrap`)")
        root = folder / "rootfs"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        progress(f"Building the Debian {suite} root file system of {purpose} with "
                 f"{', '.join(packages)} from {mirror} (first time only, a few "
                 "minutes; cached afterwards)...")
        started = time.monotonic()
        _run_with_heartbeat(
            [debootstrap, "--variant=minbase", f"--include={','.join(packages)}",
             suite, str(root), mirror], "debootstrap", progress)
        for relative in TRIM:
            target = root / relative
            if target.is_dir():
                shutil.rmtree(target)
                target.mkdir()
        for pattern in remove:
            for target in root.glob(pattern):
                target.unlink()
        progress(f"  root file system ready in {time.monotonic() - started:.0f}s; packing it")
        partial = layer.with_name("layer.tar.partial")
        proc = subprocess.run(
            ["tar", "--numeric-owner", "--exclude=./dev/*", "--exclude=./proc/*",
             "--exclude=./sys/*", "-C", str(root), "-cf", str(partial), "."],
            capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ImageError(f"packing the root file system failed: {proc.stderr.strip()}")
        partial.rename(layer)
        shutil.rmtree(root)
        progress(f"Built the Debian layer ({layer.stat().st_size / 2**20:.0f} MiB) in "
                 f"{time.monotonic() - started:.0f}s -> {layer}")
        return layer


def _run_with_heartbeat(command: list[str], label: str, progress: Progress) -> None:
    """Run COMMAND, printing its latest line every 15 s; a failure names the last lines."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    started = time.monotonic()
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(15):
            last = lines[-1] if lines else "starting"
            progress(f"  {label}: {int(time.monotonic() - started)}s elapsed: {last}")

    ticker = threading.Thread(target=heartbeat, daemon=True)
    ticker.start()
    try:
        for line in proc.stdout:
            lines.append(line.rstrip())
            del lines[:-20]
        proc.wait()
    finally:
        stop.set()
    if proc.returncode != 0:
        raise ImageError(f"{label} failed ({proc.returncode}): {' | '.join(lines[-3:])}")


# the parts of the package a worker image carries: the SDK (stdlib only) and the SDC probe
# (numpy, and the pure vote it shares with the operator); nothing that needs kopf or pydantic.
# A unit test checks that they import nothing of the package beyond this list.
IMAGE_MODULES = ("__init__.py", "names.py", "sdk/__init__.py", "sdk/fingerprint.py",
                 "sdk/checkpoint.py", "sdk/tiers.py", "sdk/shared.py", "sdk/objectstore.py",
                 "probe/__init__.py", "probe/__main__.py", "probe/workload.py",
                 "health/__init__.py", "health/sdc.py")
# the probe Job runs `python -m goodput_operator.probe`; Debian names it python3
LINKS = {"usr/bin/python": "python3"}


def app_files() -> dict[str, tuple[bytes, int]]:
    """What the worker image adds to Debian: the SDK, the SDC probe, the example trainer
    and the toy model server, so the operator's probe Jobs run on real nodes from this
    image too."""
    files = {f"{SDK_DIR}/{name}": ((PACKAGE_ROOT / name).read_bytes(), 0o644)
             for name in IMAGE_MODULES}
    if not (TRAINER_SOURCE / "train.py").is_file():
        raise ImageError(f"the example trainer is not at {TRAINER_SOURCE}: the worker image "
                         "is built from a checkout of the goodput-operator repository")
    for source in sorted(TRAINER_SOURCE.glob("*.py")):
        files[f"{TRAINER_DIR}/{source.name}"] = (source.read_bytes(), 0o755)
    for source in sorted(SERVER_SOURCE.glob("*.py")):
        files[f"{SERVER_DIR}/{source.name}"] = (source.read_bytes(), 0o755)
    return files


def worker_image(progress: Progress = build.print_progress) -> Image:
    base = base_layer(progress)
    files = app_files()
    folder = images_dir() / f"worker-{_key(digest_of(base), sorted(files.items()), LINKS)}"
    archive = folder / "image.tar"
    with build._locked(images_dir() / "locks" / "worker.lock"):
        if archive.is_file():
            return Image(WORKER_IMAGE, archive)
        folder.mkdir(parents=True, exist_ok=True)
        app = _files_layer(folder / "app.tar", files, LINKS)
        pack(archive, WORKER_IMAGE, [base, app], {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "PYTHONUNBUFFERED=1"],
            "Cmd": ["python3", f"/{TRAINER_DIR}/train.py"], "WorkingDir": "/"})
        progress(f"Packed the worker image {WORKER_IMAGE} -> {archive}")
        return Image(WORKER_IMAGE, archive)


def ensure_images(progress: Progress = build.print_progress) -> list[Image]:
    return [pause_image(progress), worker_image(progress)]


def import_image(ctr: Sequence[str], image: Image) -> None:
    """Import IMAGE into one containerd (CTR: the `ctr` command with its socket)."""
    proc = subprocess.run([*ctr, "-n", "k8s.io", "images", "import", str(image.archive)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ImageError(f"importing {image.name} failed: {proc.stderr.strip()}")
