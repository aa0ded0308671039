"""The operator's own image, built from the repository's Dockerfile without Docker.

No registry is reachable from the machines this project is built on, so the Dockerfile's
base (`python:*-slim-bookworm` elsewhere) is made here: a Debian minbase root with Python and
pip from ``debootstrap`` (Debian's EXTERNALLY-MANAGED marker removed so ``pip install`` works
as in the upstream image), imported into Debian's daemonless ``buildah``. The Dockerfile takes
the base as the build argument ``BASE_IMAGE`` and is otherwise what a user builds with
``docker build`` elsewhere. See shared/design/REAL-NODES.md for the traps: ``--network host``
(else buildah makes its own bridge and iptables chains), ``--pull=never`` (no registry is ever
asked) and the host's CA bundle bind-mounted for the build only (HTTPS to PyPI goes through
an intercepting proxy here; the bundle does not end up in the image).

The result is saved as a docker-archive tar under ``<cache>/images/operator`` and imported
into real nodes' containerd like the worker image.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from goodput_operator import __version__
from goodput_operator.sandbox import build, images

REPOSITORY = "ghcr.io/goodput-dev/goodput-operator"  # the chart's default image.repository
CHECKOUT = Path(__file__).resolve().parents[3]
BASE_PACKAGES = ("python3", "python3-pip", "python3-venv", "python-is-python3",
                 "ca-certificates")
# Debian's PEP 668 marker: the upstream python image has none, and the Dockerfile pip-installs
EXTERNALLY_MANAGED = ("usr/lib/python3*/EXTERNALLY-MANAGED",)
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
Progress = build.Progress


@dataclass(frozen=True)
class OperatorImage:
    name: str
    archive: Path  # docker-archive tar, ready for `ctr images import`
    size: str  # the image's unpacked size, as buildah reports it ("389 MB")
    seconds: float  # this build's wall time (a cached build takes seconds)

    def as_image(self) -> images.Image:
        return images.Image(self.name, self.archive)


def buildah_storage() -> Path:
    return build.cache_root() / "buildah"


def buildah(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """buildah on the project's own storage (not /var/lib/containers)."""
    binary = shutil.which("buildah")
    if not binary:
        raise images.ImageError("buildah is not installed: run scripts/install-real-node-deps.sh "
                                "(or `apt-get install buildah`)")
    storage = buildah_storage()
    return subprocess.run(
        [binary, "--root", str(storage / "root"), "--runroot", str(storage / "run"),
         "--storage-driver", "overlay", *args],
        capture_output=True, text=True, timeout=timeout, check=False)


def _checked(proc: subprocess.CompletedProcess[str], what: str) -> str:
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise images.ImageError(f"{what} failed: {' | '.join(lines[-4:]) or 'no output'}")
    return proc.stdout


def base_image(progress: Progress = build.print_progress) -> str:
    """The Dockerfile's base, made from Debian's packages and known to buildah by a name
    that changes with its content."""
    layer = images.debian_layer(BASE_PACKAGES, "the operator image's base",
                                remove=EXTERNALLY_MANAGED, progress=progress)
    archive = layer.with_name("image.tar")
    if not archive.is_file():
        images.pack(archive, "goodput/python-base", [layer], {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "LANG=C.UTF-8"],
            "Cmd": ["python3"]})
    name = f"localhost/goodput/python-base:{images.digest_of(archive)[7:19]}"
    if buildah("inspect", "--type", "image", name).returncode == 0:
        return name
    image_id = _checked(buildah("pull", "--quiet", f"oci-archive:{archive}"),
                        "importing the base image into buildah").strip().splitlines()[-1]
    _checked(buildah("tag", image_id, name), "naming the base image")
    return name


def build_image(tag: str = __version__, dockerfile: Path | None = None,
                progress: Progress = build.print_progress) -> OperatorImage:
    """Build REPOSITORY:TAG from the Dockerfile (buildah's layer cache makes a rebuild of
    unchanged sources take seconds) and save it as a docker-archive."""
    dockerfile = dockerfile or CHECKOUT / "Dockerfile"
    if not dockerfile.is_file():
        raise images.ImageError(f"no Dockerfile at {dockerfile}: the operator image is built "
                                "from a checkout of the goodput-operator repository")
    # one build at a time on this storage: `make test` builds the image before the
    # real-node lane starts, and that lane's fixture asks for it again
    with build._locked(build.cache_root() / "locks" / "operator-image.lock"):
        return _build_image(tag, dockerfile, progress)


def _build_image(tag: str, dockerfile: Path, progress: Progress) -> OperatorImage:
    started = time.monotonic()
    base = base_image(progress)
    name = f"{REPOSITORY}:{tag}"
    progress(f"Building {name} from {dockerfile} with buildah (base {base})...")
    mounts = ["--volume", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"] if CA_BUNDLE.is_file() else []
    _checked(buildah("bud", "--layers", "--network", "host", "--pull=never",
                     "--build-arg", f"BASE_IMAGE={base}", *mounts,
                     "--tag", name, "--file", str(dockerfile), str(dockerfile.parent)),
             f"buildah bud {dockerfile}")
    image_id = _checked(buildah("images", "--quiet", "--no-trunc", name),
                        f"inspecting {name}").split()[0]
    folder = images.images_dir() / "operator"
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"{tag}.tar"
    saved_id = archive.with_name(archive.name + ".id")
    if not (archive.is_file() and saved_id.is_file() and saved_id.read_text() == image_id):
        partial = archive.with_name(archive.name + ".partial")
        partial.unlink(missing_ok=True)
        _checked(buildah("push", "--quiet", name, f"docker-archive:{partial}:{name}"),
                 f"saving {name}")
        partial.rename(archive)
        saved_id.write_text(image_id)
    size = image_size(name)
    built = OperatorImage(name, archive, size, time.monotonic() - started)
    progress(f"Built {name}: {size}, archive {archive.stat().st_size / 1e6:.0f} MB, "
             f"in {built.seconds:.0f}s -> {archive}")
    return built


def image_size(name: str) -> str:
    """The image's size as `buildah images` reports it (its layers, unpacked)."""
    out = _checked(buildah("images", "--json", name), f"inspecting {name}")
    found: list[dict[str, object]] = json.loads(out)
    return str(found[0].get("size", "?")) if found else "?"


def saved() -> list[images.Image]:
    """Every operator image tag saved by build_image: a real node started later gets them
    too, as nodes of a real cluster pull whatever their pods name."""
    folder = images.images_dir() / "operator"
    return [images.Image(f"{REPOSITORY}:{archive.stem}", archive)
            for archive in sorted(folder.glob("*.tar"))]
