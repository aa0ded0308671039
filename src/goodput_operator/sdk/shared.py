"""The shared-filesystem tier of a checkpoint on an object store (`checkpoint.sharedDir`:
FSx for Lustre, EFS, NFS, mounted on every node): the object store's calls over a POSIX
folder, so that sdk.tiers saves, commits and fetches a step in it exactly as it does in
the store. A key is a path under the folder; every write goes to a scratch file beside its
target, is flushed and renamed into place, so a reader never sees half a file and a commit
object is there only once the files before it are. Standard library only.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Protocol

from goodput_operator.sdk.objectstore import ObjectStoreError


class Tier(Protocol):
    """A durable tier: the object store (sdk.objectstore.ObjectStore) or a SharedFolder."""

    @property
    def where(self) -> str: ...

    def put_file(self, bucket: str, key: str, path: Path) -> None: ...

    def put_bytes(self, bucket: str, key: str, data: bytes) -> None: ...

    def get_bytes(self, bucket: str, key: str) -> bytes: ...

    def get_file(self, bucket: str, key: str, path: Path) -> None: ...


class SharedFolder:
    """Objects as files under ROOT (KEY is the path below it; the bucket is the store's,
    not the folder's: the job's sharedDir is its own). A missing file is a 404, as the
    store's missing key is."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def where(self) -> str:
        return f"the shared folder {self.root}"

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise ObjectStoreError(400, f"key {key!r} is outside {self.root}")
        return path

    def _written(self, key: str, fill: bytes | Path) -> None:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = target.with_name(f".{target.name}.partial-{os.getpid()}")
        if isinstance(fill, Path):
            shutil.copyfile(fill, scratch)
        else:
            scratch.write_bytes(fill)
        with scratch.open("rb") as handle:
            os.fsync(handle.fileno())
        scratch.replace(target)

    def put_file(self, bucket: str, key: str, path: Path) -> None:
        self._written(key, path)

    def put_bytes(self, bucket: str, key: str, data: bytes) -> None:
        self._written(key, data)

    def get_bytes(self, bucket: str, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise ObjectStoreError(404, f"{key} is not in {self.root}") from None

    def get_file(self, bucket: str, key: str, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(self._path(key), path)
        except FileNotFoundError:
            raise ObjectStoreError(404, f"{key} is not in {self.root}") from None
