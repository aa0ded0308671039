"""Checkpoints on an object store (`checkpoint.dir: s3://bucket/prefix`), through a
node-local copy and, when the job has one, a shared filesystem: the worker's side of
sdk.checkpoint for a remote directory.

Tiers, fastest first: the node-local copy (GOODPUT_CHECKPOINT_LOCAL, e.g. the node's NVMe;
default a folder under the temporary directory), the shared filesystem
(GOODPUT_CHECKPOINT_SHARED, `checkpoint.sharedDir`: FSx, EFS, NFS; optional), then the
object store. A save writes the node-local copy (the training stall), then copies its files
to each durable tier and last a commit object holding the step's manifest (each file's
sha256) and digest: a step is committed in a tier only once that tier's commit object
exists, and to the operator once the object store's does. With BACKGROUND the copies and
the commits run on a thread of their own while training goes on. A resume takes the
node-local copy when it holds the committed digest (a restart on the same node), else the
first durable tier whose commit object holds it, fetching exactly the files it lists and
checking each one and the digest.
The digest of a checkpoint on an object store is `sha256-manifest:` over the sorted
(name, sha256) pairs, so that ranks writing their shards from different nodes can agree on
it without reading each other's bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goodput_operator import names
from goodput_operator.sdk.objectstore import ObjectStore, ObjectStoreError, split_url
from goodput_operator.sdk.shared import SharedFolder, Tier

if TYPE_CHECKING:
    from goodput_operator.sdk import Reporter

COMMIT = ".goodput-commit"  # the object that commits a step in the store
DONE = ".goodput-shard-a{attempt}-{rank:05d}"  # a rank's part of a sharded step, uploaded
MANIFEST = "sha256-manifest:"


class TierError(RuntimeError):
    """A checkpoint on the object store is missing, uncommitted or not what was committed."""


class Mismatch(TierError):
    """What the store holds is not what was committed: the checkpoint is corrupt."""


def step_name(step: int) -> str:
    return f"step-{step:08d}"


def local_root(url: str) -> Path:
    """The node-local folder that holds copies of URL's checkpoints."""
    base = os.environ.get(names.ENV_CHECKPOINT_LOCAL) or os.path.join(tempfile.gettempdir(),
                                                     "goodput-checkpoints")
    bucket, prefix = split_url(url)
    return Path(base) / bucket / prefix


def file_hashes(folder: Path) -> dict[str, str]:
    """Each file under FOLDER (relative name) -> its sha256, markers left out."""
    found = {}
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = str(file.relative_to(folder))
        if name.startswith(".goodput-"):
            continue
        sha = hashlib.sha256()
        with file.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                sha.update(chunk)
        found[name] = sha.hexdigest()
    return found


def manifest_digest(manifest: dict[str, str]) -> str:
    if not manifest:
        raise TierError("checkpoint is empty")
    sha = hashlib.sha256()
    for name in sorted(manifest):
        sha.update(f"{name}\0{manifest[name]}\n".encode())
    return MANIFEST + sha.hexdigest()


def scratch_written(final: Path, write: Callable[[Path], Any]) -> Path:
    """A scratch folder beside FINAL filled by WRITE, its files flushed to disk: what is
    renamed into place once complete, so that no reader sees half a checkpoint."""
    scratch = final.with_name(f".{final.name}.partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    write(scratch)
    for file in scratch.rglob("*"):
        if file.is_file():
            with file.open("rb") as handle:
                os.fsync(handle.fileno())
    return scratch


def write_local(step: int, write: Callable[[Path], Any], url: str) -> Path:
    """STEP written by WRITE into the node-local tier, renamed into place (a step written
    again after a rollback replaces the old copy)."""
    final = local_root(url) / step_name(step)
    scratch = scratch_written(final, write)
    if final.exists():
        shutil.rmtree(final)
    scratch.rename(final)
    return final


def upload(store: Tier, folder: Path, url: str, step: int,
           manifest: dict[str, str]) -> None:
    bucket, prefix = split_url(url)
    for name in manifest:
        store.put_file(bucket, f"{prefix}/{step_name(step)}/{name}", folder / name)


def commit_in_store(store: Tier, url: str, step: int, manifest: dict[str, str]) -> str:
    """The commit object of STEP in STORE (its manifest and digest), written last; the
    digest."""
    bucket, prefix = split_url(url)
    found = manifest_digest(manifest)
    store.put_bytes(bucket, f"{prefix}/{step_name(step)}/{COMMIT}", json.dumps(
        {"step": step, "digest": found, "files": manifest}, sort_keys=True).encode())
    return found


def durable_tiers() -> list[Tier]:
    """Where a step is made durable, in order: the shared filesystem when the job has one,
    then the object store (the last: its commit is the operator's)."""
    shared = os.environ.get(names.ENV_CHECKPOINT_SHARED)
    return [*([SharedFolder(Path(shared))] if shared else []), ObjectStore.from_env()]


def save(step: int, write: Callable[[Path], Any], url: str, commit: bool,
         reporter: Reporter | None, began: float, background: bool) -> tuple[Path, str]:
    """sdk.checkpoint.save for an object store URL: (the node-local folder, its digest)."""
    tiers = durable_tiers()
    folder = write_local(step, write, url)
    manifest = file_hashes(folder)
    found = manifest_digest(manifest)
    stall = time.monotonic() - began

    def durable() -> None:
        for tier in tiers:
            upload(tier, folder, url, step, manifest)
            commit_in_store(tier, url, step, manifest)
        if commit:
            _commit(reporter, step, f"{url.rstrip('/')}/{step_name(step)}", found,
                    stall if background else time.monotonic() - began)

    if background:
        UPLOADS.start(durable)
    else:
        durable()
    return folder, found


def save_sharded(step: int, write: Callable[[Path], Any], rank: int, shards: int, url: str,
                 commit: bool, reporter: Reporter | None, timeout: float, poll: float,
                 began: float) -> tuple[Path, str | None]:
    """sdk.checkpoint.save_sharded for an object store URL: in each durable tier, each
    rank puts its part and a marker listing its files; rank 0 waits for every marker,
    then commits the step there."""
    tiers = durable_tiers()
    folder = write_local(step, write, f"{url.rstrip('/')}/rank-{rank:05d}")
    mine = file_hashes(folder)
    found = None
    for tier in tiers:
        found = _shard_in(tier, folder, mine, step, rank, shards, url, timeout, poll)
    if found is not None and commit:
        _commit(reporter, step, f"{url.rstrip('/')}/{step_name(step)}", found,
                time.monotonic() - began)
    return folder, found


def _shard_in(store: Tier, folder: Path, mine: dict[str, str], step: int, rank: int,
              shards: int, url: str, timeout: float, poll: float) -> str | None:
    """RANK's part of STEP put in STORE with its marker; rank 0 also waits for every
    rank's marker and commits the step there (its digest; None on the other ranks)."""
    bucket, prefix = split_url(url)
    attempt = os.environ.get(names.ENV_RESTART, "0")
    upload(store, folder, url, step, mine)
    base = f"{prefix}/{step_name(step)}"
    store.put_bytes(bucket, f"{base}/{DONE.format(attempt=attempt, rank=rank)}",
                    json.dumps(mine, sort_keys=True).encode())
    if rank != 0:
        return None
    deadline = time.monotonic() + timeout
    manifest: dict[str, str] = {}
    missing = list(range(shards))
    while missing:
        for other in list(missing):
            key = f"{base}/{DONE.format(attempt=attempt, rank=other)}"
            try:
                manifest |= json.loads(store.get_bytes(bucket, key))
                missing.remove(other)
            except ObjectStoreError as err:
                if err.status != 404:
                    raise
        if missing and time.monotonic() > deadline:
            raise TierError(f"checkpoint step {step}: rank(s) {missing[:8]} of {shards} did "
                            f"not upload their part in {timeout:.0f}s: not committed")
        if missing:
            time.sleep(poll)
    return commit_in_store(store, url, step, manifest)


def fetch(location: str, step: int, committed: str | None) -> Path:
    """The checkpoint at LOCATION (s3://.../step-N) in a node-local folder, checked: the
    node-local copy when it holds the COMMITTED digest, else the files the first durable
    tier's commit object lists (the shared filesystem's, then the store's), each checked
    against its sha256, and the manifest against COMMITTED. A tier that does not hold the
    step as committed is passed over; Mismatch only when none holds it and one held
    something else."""
    url = location.rstrip("/").rsplit("/", 1)[0]
    folder = local_root(url) / step_name(step)
    if committed and folder.is_dir():
        with contextlib.suppress(OSError, TierError):  # unreadable: fetch it again
            if manifest_digest(file_hashes(folder)) == committed:
                return folder  # the fastest tier: this node wrote or fetched it
    errors: list[TierError] = []
    for tier in durable_tiers():
        try:
            return _fetched_from(tier, location, folder, committed)
        except TierError as err:
            errors.append(err)
    mismatch = next((err for err in errors if isinstance(err, Mismatch)), None)
    raise mismatch or errors[-1]


def _fetched_from(store: Tier, location: str, folder: Path, committed: str | None) -> Path:
    """LOCATION's files from STORE into FOLDER, once its commit object and every file
    are what was committed."""
    bucket, prefix = split_url(location)
    try:
        record = json.loads(store.get_bytes(bucket, f"{prefix}/{COMMIT}"))
    except ObjectStoreError as err:
        if err.status == 404:
            raise TierError(f"checkpoint {location} has no commit object in {store.where}: "
                            "it was never committed there") from None
        raise
    manifest: dict[str, str] = record.get("files") or {}
    if committed and record.get("digest") != committed:
        raise Mismatch(f"checkpoint {location}: the commit object in {store.where} says "
                       f"digest {record.get('digest')}, the operator's record {committed}")
    scratch = folder.with_name(f".{folder.name}.fetch-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    for name in manifest:
        try:
            store.get_file(bucket, f"{prefix}/{name}", scratch / name)
        except ObjectStoreError as err:
            if err.status != 404:
                raise
            shutil.rmtree(scratch, ignore_errors=True)
            raise Mismatch(f"checkpoint {location}: {name} is gone from {store.where} since "
                           "its commit") from None
    fetched = file_hashes(scratch) if manifest else {}
    if fetched != manifest:
        bad = sorted(n for n in manifest if fetched.get(n) != manifest[n])
        shutil.rmtree(scratch, ignore_errors=True)
        raise Mismatch(f"checkpoint {location}: {len(bad)} file(s) in {store.where} differ "
                       f"from the commit object's manifest ({', '.join(bad[:3])})")
    if folder.exists():
        shutil.rmtree(folder)
    scratch.rename(folder)
    return folder


def _commit(reporter: Reporter | None, step: int, path: str, found: str, seconds: float
            ) -> None:
    from goodput_operator.sdk import _reporter

    (reporter or _reporter()).commit_checkpoint(step, path, digest=found,
                                                save_seconds=seconds)


class Uploads:
    """The background uploads, one at a time in the order saved (a newer step is never
    committed before an older one); `wait` blocks until they are done and raises the
    first failure."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: threading.Thread | None = None
        self.failure: BaseException | None = None

    def start(self, work: Callable[[], None]) -> None:
        with self._lock:
            before = self._last

            def run() -> None:
                if before is not None:
                    before.join()
                try:
                    work()
                except BaseException as err:  # raised by wait(), in the caller's thread
                    self.failure = self.failure or err

            self._last = threading.Thread(target=run, daemon=True, name="goodput-upload")
            self._last.start()

    def wait(self, timeout: float | None = None) -> None:
        with self._lock:
            last = self._last
        if last is not None:
            last.join(timeout)
        failure, self.failure = self.failure, None
        if failure is not None:
            raise failure


UPLOADS = Uploads()
