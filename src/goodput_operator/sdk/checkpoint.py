"""The worker's side of checkpoints: where to resume, saving atomically, verifying a load.

    from goodput_operator.sdk import checkpoint
    point = checkpoint.resume_point()            # None on a fresh start
    if point:
        state = torch.load(checkpoint.verified(point) / "model.pt")
    ...
    checkpoint.save(step, lambda folder: torch.save(state, folder / "model.pt"))
    # or, every rank writing its own part (a sharded model, or Distributed Checkpoint):
    checkpoint.save_sharded(step, lambda folder: dcp.save(state, checkpoint_id=folder),
                            rank, world)

The operator decides where a restarted job resumes (the newest committed checkpoint, or
after suspected corruption the newest one the replicas' votes verified) and gives every
worker its step, path and digest (GOODPUT_RESUME_STEP/_FROM/_DIGEST). `save` writes into a
scratch folder, makes it durable, renames it into place and only then commits it: a
checkpoint the operator knows of is always complete. `save_sharded` commits a step only once
every rank has finished its part. `verified` recomputes the digest of
what is about to be loaded and refuses a folder that changed since it was committed.
Standard library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goodput_operator import names
from goodput_operator.sdk import tiers
from goodput_operator.sdk.objectstore import is_remote

if TYPE_CHECKING:
    from goodput_operator.sdk import Reporter


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete or not what was committed."""


@dataclass(frozen=True)
class ResumePoint:
    step: int
    path: Path | str  # a folder, or an object store URL (s3://bucket/prefix/step-N)
    digest: str | None


def resume_point(env: dict[str, str] | None = None) -> ResumePoint | None:
    """Where this attempt resumes, as the operator decided; None: start from scratch."""
    env = dict(os.environ) if env is None else env
    path = env.get(names.ENV_RESUME_FROM, "")
    if not path:
        return None
    step = env.get(names.ENV_RESUME_STEP, "")
    return ResumePoint(int(step) if step else -1, path if is_remote(path) else Path(path),
                       env.get(names.ENV_RESUME_DIGEST) or None)


def digest(path: str | Path) -> str:
    """sha256 over a checkpoint: a file's bytes, or a folder's files (relative names and
    contents, in sorted order), so a missing, renamed or changed shard changes it."""
    root = Path(path)
    sha = hashlib.sha256()
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    if not files:
        raise CheckpointError(f"checkpoint {root} is missing or empty")
    for file in files:
        if root.is_dir():
            sha.update(str(file.relative_to(root)).encode() + b"\0")
        with file.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                sha.update(chunk)
        sha.update(b"\0")
    return f"sha256:{sha.hexdigest()}"


def verified(point: ResumePoint, reporter: Reporter | None = None,
             report: bool = True) -> Path:
    """POINT's folder, once its content is checked against the committed digest. A folder
    that changed since it was committed is reported to the operator as corrupt (REPORTER,
    else the worker's own channel when it runs under the operator; REPORT false: not at
    all) before CheckpointError is raised: the job never resumes from it again, so the
    restart that follows this worker's exit resumes from the checkpoint before it.
    On an object store (sdk.tiers): the node-local copy when it holds the committed
    digest, else the files fetched from the store and checked file by file."""
    if isinstance(point.path, str):
        try:
            return tiers.fetch(point.path, point.step, point.digest)
        except tiers.TierError as err:
            if report and isinstance(err, tiers.Mismatch):
                _report_corrupt(point, str(err), reporter)
            raise CheckpointError(str(err)) from None
    if not point.path.exists():
        raise CheckpointError(f"checkpoint {point.path} (step {point.step}) does not exist: is "
                              "the checkpoint directory shared by every node?")
    if point.digest is not None:
        found = digest(point.path)
        if found != point.digest:
            why = f"digest {found}, committed {point.digest}"
            if report:
                _report_corrupt(point, why, reporter)
            raise CheckpointError(f"checkpoint {point.path} (step {point.step}) is not what was "
                                  f"committed: {why}")
    return point.path


def _report_corrupt(point: ResumePoint, why: str, reporter: Reporter | None) -> None:
    from goodput_operator.sdk import ReportError, _reporter

    sender = reporter if reporter is not None else \
        _reporter() if os.environ.get(names.ENV_REPORT_URL) else None
    if sender is None:
        return
    with contextlib.suppress(ReportError):  # best effort: the worker fails either way
        sender.report_corrupt(point.step, str(point.path), why)


def _base(root: str | Path | None) -> str:
    """The checkpoint directory: ROOT, else the job's (GOODPUT_CHECKPOINT_DIR)."""
    base = str(root) if root is not None else os.environ.get(names.ENV_CHECKPOINT_DIR, "")
    if not base:
        raise CheckpointError("no checkpoint directory: set spec.checkpoint.dir on the "
                              "TrainingJob (GOODPUT_CHECKPOINT_DIR)")
    return base


def step_dir(step: int, root: str | Path | None = None) -> Path:
    """The folder of STEP under the job's checkpoint directory (GOODPUT_CHECKPOINT_DIR)."""
    return Path(_base(root)) / tiers.step_name(step)


def wait_uploads(timeout: float | None = None) -> None:
    """Wait for the background uploads of `save(..., background=True)` to be committed;
    raises the first one that failed. Call it before the worker exits."""
    tiers.UPLOADS.wait(timeout)


def save(step: int, write: Callable[[Path], Any], root: str | Path | None = None,
         commit: bool = True, reporter: Reporter | None = None, background: bool = False
         ) -> tuple[Path, str]:
    """Write checkpoint STEP with WRITE(folder), atomically, then commit it to the operator.

    WRITE fills a scratch folder; the files are flushed to disk and the folder is renamed to
    its final name, so a reader never sees half a checkpoint. Returns (folder, digest).
    Call it on the rank that holds the state (rank 0 for data parallel training). The
    commit carries how long the save took (the job's goodput counts it as a stall; an
    asynchronous save that does not stall training should commit with
    `sdk.commit_checkpoint` itself, saying so).

    On an object store (`s3://bucket/prefix`, sdk.tiers): written to the node-local tier,
    then uploaded with a commit object, then committed; the folder returned is the
    node-local copy. BACKGROUND: the upload and the commit run on a thread while training
    goes on (the stall counted is the node-local write); `wait_uploads()` before exit."""
    began = time.monotonic()
    if is_remote(_base(root)):
        return tiers.save(step, write, _base(root), commit, reporter, began, background)
    final = step_dir(step, root)
    return _publish(step, tiers.scratch_written(final, write), final, commit, reporter, began)


def _publish(step: int, written: Path, final: Path, commit: bool, reporter: Reporter | None,
             began: float) -> tuple[Path, str]:
    """Rename the complete folder WRITTEN into place as FINAL and commit it, with the
    digest of what it holds and the seconds since the save BEGAN (time.monotonic)."""
    found = digest(written)
    if final.exists():  # a step written again after a rollback replaces the old one
        shutil.rmtree(final)
    written.rename(final)
    if commit:
        from goodput_operator.sdk import _reporter

        (reporter or _reporter()).commit_checkpoint(step, str(final), digest=found,
                                                    save_seconds=time.monotonic() - began)
    return final, found


DONE = ".goodput-shard-{rank:05d}-done"  # a rank's part of a sharded step is complete


def save_sharded(step: int, write: Callable[[Path], Any], rank: int, shards: int,
                 root: str | Path | None = None, commit: bool = True,
                 reporter: Reporter | None = None, timeout: float = 600.0,
                 poll: float = 0.2) -> tuple[Path, str | None]:
    """Write this RANK's part of checkpoint STEP, written by SHARDS ranks together; the
    step is committed only once every part is complete, so a step a rank died writing is
    never a resume point. Every writing rank calls it, with the same STEP and SHARDS.

    WRITE(folder) gets the step's staging folder, shared by all ranks (one file per rank,
    as `torch.save(state, folder / f"rank-{rank}.pt")`, or PyTorch Distributed
    Checkpoint's `dcp.save(state_dict, checkpoint_id=folder)`, which also writes the
    metadata from its coordinator). Each rank's files are flushed, then its done-marker is
    written. Rank 0 waits (up to TIMEOUT seconds) for all SHARDS markers, renames the
    folder into place and commits it with its digest: (folder, digest). The other ranks
    return (the final folder, None) once their part is down. CheckpointError on rank 0 when
    a part never completes: nothing is committed, the previous checkpoint stays the resume
    point."""
    began = time.monotonic()
    if not 0 <= rank < shards:
        raise CheckpointError(f"rank {rank} is not one of {shards} shards")
    if is_remote(_base(root)):  # each rank uploads its part; rank 0 commits (sdk.tiers)
        try:
            return tiers.save_sharded(step, write, rank, shards, _base(root), commit,
                                      reporter, timeout, poll, began)
        except tiers.TierError as err:
            raise CheckpointError(str(err)) from None
    final = step_dir(step, root)
    attempt = os.environ.get(names.ENV_RESTART, "0")
    staging = final.with_name(f".{final.name}.staging-a{attempt}")
    staging.mkdir(parents=True, exist_ok=True)
    before = {p for p in staging.rglob("*") if p.is_file()}
    write(staging)
    for file in staging.rglob("*"):
        if file.is_file() and file not in before:
            with file.open("rb") as handle:
                os.fsync(handle.fileno())
    # the marker appears whole (written aside, then renamed): rank 0 digests the folder as
    # soon as every marker exists, so one still being written would change it afterwards
    marker = staging / DONE.format(rank=rank)
    aside = marker.with_name(marker.name + ".writing")
    with aside.open("w") as handle:
        handle.write(f"{step} {shards}\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(aside, marker)
    if rank != 0:
        return final, None
    deadline = time.monotonic() + timeout
    missing = [r for r in range(shards) if not (staging / DONE.format(rank=r)).exists()]
    while missing:
        if time.monotonic() > deadline:
            raise CheckpointError(f"checkpoint step {step}: rank(s) {missing[:8]} of {shards} "
                                  f"did not finish their part in {timeout:.0f}s: not committed")
        time.sleep(poll)
        missing = [r for r in missing if not (staging / DONE.format(rank=r)).exists()]
    return _publish(step, staging, final, commit, reporter, began)
