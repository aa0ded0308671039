"""The operator image: build time (from nothing, with new sources, with nothing changed),
size, and the time to import it into a node's containerd.

    python -m bench.image [--json] [--keep-base]

Baselines in the same run: the image's own base (size) and the uncached build (time): the
ratios say what the wheel's dependencies add and what buildah's layer cache saves. Builds
use the project's own buildah storage, which this benchmark empties first (the Debian base
layer is kept with --keep-base: debootstrap is slow and not what is measured then).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from goodput_operator.sandbox import images, operator_image

TAG = "bench"


def timed(step: Any) -> tuple[float, Any]:
    started = time.monotonic()
    result = step()
    return time.monotonic() - started, result


def size_mb(name: str) -> float:
    """buildah's size ("389 MB") in MB."""
    number, unit = operator_image.image_size(name).split()
    return float(number) * {"kB": 1e-3, "MB": 1.0, "GB": 1e3}[unit]


def import_seconds(archive: Path) -> float:
    """Import ARCHIVE into a throwaway containerd (its own root and socket), as a real node
    does when it starts."""
    with tempfile.TemporaryDirectory(prefix="bench-ctrd-") as folder:
        root = Path(folder)
        sock = root / "containerd.sock"
        config = root / "config.toml"
        config.write_text(f'version = 2\nroot = "{root / "root"}"\nstate = "{root / "state"}"\n'
                          f'[grpc]\naddress = "{sock}"\n')
        daemon = subprocess.Popen(["containerd", "--config", str(config)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while not sock.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            seconds, _ = timed(lambda: images.import_image(
                ["ctr", "--address", str(sock)], images.Image("bench", archive)))
            return seconds
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
            subprocess.run(["umount", "-R", str(root / "root")], capture_output=True,
                           check=False)


def run(keep_base: bool) -> dict[str, Any]:
    storage = operator_image.buildah_storage()
    if storage.exists():
        operator_image.buildah("rmi", "--all", "--force")
        shutil.rmtree(storage, ignore_errors=True)
    if not keep_base:
        for folder in images.images_dir().glob("debian-*"):
            if (folder / "image.tar").exists():  # the operator base's folder, not the worker's
                shutil.rmtree(folder)
    base_s, base = timed(operator_image.base_image)
    cold_s, cold = timed(lambda: operator_image.build_image(TAG))
    cached_s, _ = timed(lambda: operator_image.build_image(TAG))
    import_s = import_seconds(cold.archive)
    result = {
        "base_seconds": round(base_s, 1), "base_mb": size_mb(base),
        "build_seconds_uncached": round(cold_s, 1),
        "build_seconds_cached": round(cached_s, 2),
        "image_mb": size_mb(cold.name),
        "archive_mb": round(cold.archive.stat().st_size / 1e6),
        "import_seconds": round(import_s, 1),
    }
    result["cached_vs_uncached"] = round(result["build_seconds_cached"]
                                         / result["build_seconds_uncached"], 3)
    result["image_vs_base"] = round(result["image_mb"] / result["base_mb"], 2)
    for archive in cold.archive.parent.glob(f"{TAG}.tar*"):
        archive.unlink()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep-base", action="store_true",
                        help="reuse the Debian base layer (skip debootstrap)")
    args = parser.parse_args(argv)
    result = run(args.keep_base)
    print(f"{'step':<34}{'value':>12}")
    print(f"{'base (debootstrap + import)':<34}{result['base_seconds']:>10.1f} s")
    print(f"{'build, nothing cached':<34}{result['build_seconds_uncached']:>10.1f} s")
    print(f"{'build, nothing changed':<34}{result['build_seconds_cached']:>10.2f} s"
          f"   x{result['cached_vs_uncached']} of uncached")
    print(f"{'import into one containerd':<34}{result['import_seconds']:>10.1f} s")
    print(f"{'base size':<34}{result['base_mb']:>9.0f} MB")
    print(f"{'image size':<34}{result['image_mb']:>9.0f} MB   x{result['image_vs_base']} of base")
    print(f"{'archive (docker-archive tar)':<34}{result['archive_mb']:>9.0f} MB")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
