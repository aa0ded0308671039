"""The images every real node has, imported once and handed to each node as hard links.

Importing the worker image (1.2 GB: Debian, python3, PyTorch) into a node's containerd
writes it into the content store and unpacks it into an overlay snapshot: about 40 s of
both cores a node, so seven nodes spent the real-node tests' first five minutes on it.
Both halves are immutable once written (blobs are named by digest; a committed snapshot
is only ever an overlay *lower* directory, so containers write to their own upper
directories), so one *seed* root is made per image content and containerd version by a
containerd of its own, and each node's root starts as a tree of hard links to it, with
its own copy of the two bolt databases (the only files containerd writes in place).
A node then starts with the images already there, in a second. Where hard links are not
possible (the seed on another file system), the node falls back to importing.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from goodput_operator.sandbox import build, images, procs

DATABASES = ("meta.db", "metadata.db")  # containerd's and the overlay snapshotter's bolt DBs
RECIPE_VERSION = 1  # bump when the seed's containerd configuration changes


def containerd_version() -> str:
    proc = subprocess.run(["containerd", "--version"], capture_output=True, text=True,
                          check=False)
    return proc.stdout.strip()


def seed_root(seeded: Sequence[images.Image], progress: build.Progress) -> Path:
    """The root of a containerd that holds SEEDED (made once per their content)."""
    key = images._key(RECIPE_VERSION, containerd_version(),
                      *(f"{i.name}@{images.digest_of(i.archive)}" for i in seeded))
    folder = images.images_dir() / f"containerd-seed-{key}"
    root = folder / "root"
    with build._locked(images.images_dir() / "locks" / f"seed-{key}.lock"):
        if (folder / "done").is_file():
            return root
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        progress(f"Importing {', '.join(i.name for i in seeded)} once for every real node...")
        socket = folder / "c.sock"
        config = folder / "containerd.toml"
        config.write_text(
            f'version = 2\nroot = {json.dumps(str(root))}\n'
            f'state = {json.dumps(str(folder / "state"))}\n'
            f'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
            f'[grpc]\naddress = {json.dumps(str(socket))}\n')
        pidfile = folder / "containerd.pid"
        try:
            procs.start_containerd(config, socket, folder / "containerd.log", pidfile)
            for image in seeded:
                images.import_image(["ctr", "--address", str(socket)], image)
        finally:
            procs.kill_pidfile(pidfile)  # SIGTERM: its databases closed cleanly
        shutil.rmtree(folder / "state", ignore_errors=True)
        (folder / "done").write_text("")
        return root


def plant(seed: Path, root: Path) -> bool:
    """Make ROOT (absent) a containerd root holding what SEED holds: directories made anew,
    databases copied, every other entry a hard link. False (ROOT left absent) when SEED is
    on another file system."""
    try:
        for here, folders, files in os.walk(seed):
            source = Path(here)
            target = root / source.relative_to(seed)
            target.mkdir(parents=True, exist_ok=True)
            shutil.copystat(source, target)
            owner = source.stat()
            os.chown(target, owner.st_uid, owner.st_gid)  # a layer's folders keep their owner
            for name in [*files, *(f for f in folders if (source / f).is_symlink())]:
                if name in DATABASES:
                    shutil.copy2(source / name, target / name)
                else:
                    os.link(source / name, target / name, follow_symlinks=False)
    except OSError as err:
        if err.errno != errno.EXDEV:
            raise
        shutil.rmtree(root, ignore_errors=True)
        return False
    return True
