"""The worker's side of checkpoints: where to resume, saving atomically, verifying a load.

    from goodput_operator.sdk import checkpoint
    point = checkpoint.resume_point()            # None on a fresh start
    if point:
        state = torch.load(checkpoint.verified(point) / "model.pt")
    ...
    checkpoint.save(step, lambda folder: torch.save(state, folder / "model.pt"))

The operator decides where a restarted job resumes (the newest committed checkpoint, or
after suspected corruption the newest one the replicas' votes verified) and gives every
worker its step, path and digest (GOODPUT_RESUME_STEP/_FROM/_DIGEST). `save` writes into a
scratch folder, makes it durable, renames it into place and only then commits it: a
checkpoint the operator knows of is always complete. `verified` recomputes the digest of
what is about to be loaded and refuses a folder that changed since it was committed.
Standard library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goodput_operator import names

if TYPE_CHECKING:
    from goodput_operator.sdk import Reporter


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete or not what was committed."""


@dataclass(frozen=True)
class ResumePoint:
    step: int
    path: Path
    digest: str | None


def resume_point(env: dict[str, str] | None = None) -> ResumePoint | None:
    """Where this attempt resumes, as the operator decided; None: start from scratch."""
    env = dict(os.environ) if env is None else env
    path = env.get(names.ENV_RESUME_FROM, "")
    if not path:
        return None
    step = env.get(names.ENV_RESUME_STEP, "")
    return ResumePoint(int(step) if step else -1, Path(path),
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
    restart that follows this worker's exit resumes from the checkpoint before it."""
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


def step_dir(step: int, root: str | Path | None = None) -> Path:
    """The folder of STEP under the job's checkpoint directory (GOODPUT_CHECKPOINT_DIR)."""
    base = root if root is not None else os.environ.get(names.ENV_CHECKPOINT_DIR, "")
    if not base:
        raise CheckpointError("no checkpoint directory: set spec.checkpoint.dir on the "
                              "TrainingJob (GOODPUT_CHECKPOINT_DIR)")
    return Path(base) / f"step-{step:08d}"


def save(step: int, write: Callable[[Path], Any], root: str | Path | None = None,
         commit: bool = True, reporter: Reporter | None = None) -> tuple[Path, str]:
    """Write checkpoint STEP with WRITE(folder), atomically, then commit it to the operator.

    WRITE fills a scratch folder; the files are flushed to disk and the folder is renamed to
    its final name, so a reader never sees half a checkpoint. Returns (folder, digest).
    Call it on the rank that holds the state (rank 0 for data parallel training)."""
    final = step_dir(step, root)
    scratch = final.with_name(f".{final.name}.partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    write(scratch)
    for file in scratch.rglob("*"):
        if file.is_file():
            with file.open("rb") as handle:
                os.fsync(handle.fileno())
    found = digest(scratch)
    if final.exists():  # a step written again after a rollback replaces the old one
        shutil.rmtree(final)
    scratch.rename(final)
    if commit:
        from goodput_operator.sdk import commit_checkpoint

        if reporter is not None:
            reporter.commit_checkpoint(step, str(final), digest=found)
        else:
            commit_checkpoint(step, str(final), digest=found)
    return final, found
