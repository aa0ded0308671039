"""A node's containerd root planted from the seed: links where the seed's files never
change, copies of the databases containerd writes in place, owners kept."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from goodput_operator.sandbox import seed

pytestmark = pytest.mark.unit


def make_seed(tmp_path: Path) -> Path:
    root = tmp_path / "seed"
    blobs = root / "io.containerd.content.v1.content" / "blobs" / "sha256"
    layer = root / "io.containerd.snapshotter.v1.overlayfs" / "snapshots" / "1" / "fs"
    for folder in (blobs, layer / "usr" / "bin", root / "io.containerd.metadata.v1.bolt"):
        folder.mkdir(parents=True)
    (blobs / "abc").write_text("layer bytes")
    (layer / "usr" / "bin" / "python3").write_text("#!")
    (layer / "bin").symlink_to("usr/bin")  # a symlink to a folder stays a symlink
    (root / "io.containerd.metadata.v1.bolt" / "meta.db").write_text("images")
    (root / "io.containerd.snapshotter.v1.overlayfs" / "metadata.db").write_text("snaps")
    os.chown(layer / "usr", 42, 42)
    return root


def test_a_planted_root_links_what_never_changes_and_copies_the_databases(
        tmp_path: Path) -> None:
    source = make_seed(tmp_path)
    planted = tmp_path / "node" / "root"
    assert seed.plant(source, planted)
    blob = "io.containerd.content.v1.content/blobs/sha256/abc"
    assert (planted / blob).stat().st_ino == (source / blob).stat().st_ino
    for db in ("io.containerd.metadata.v1.bolt/meta.db",
               "io.containerd.snapshotter.v1.overlayfs/metadata.db"):
        assert (planted / db).read_text() == (source / db).read_text()
        assert (planted / db).stat().st_ino != (source / db).stat().st_ino
        (planted / db).write_text("changed by this node")
        assert (source / db).read_text() in ("images", "snaps")
    fs = planted / "io.containerd.snapshotter.v1.overlayfs" / "snapshots" / "1" / "fs"
    assert (fs / "bin").is_symlink() and os.readlink(fs / "bin") == "usr/bin"
    assert (fs / "bin" / "python3").read_text() == "#!"
    assert (fs / "usr").stat().st_uid == 42  # a folder made anew keeps its owner


def test_a_seed_on_another_file_system_leaves_nothing_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = make_seed(tmp_path)

    def cross_device(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")
    monkeypatch.setattr(seed.os, "link", cross_device)
    planted = tmp_path / "node" / "root"
    assert seed.plant(source, planted) is False
    assert not planted.exists()
