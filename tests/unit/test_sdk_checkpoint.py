"""The SDK's checkpoint side: where to resume, atomic saves that commit, verified loads."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from goodput_operator.sdk import Reporter, checkpoint
from goodput_operator.sdk.checkpoint import CheckpointError, ResumePoint
from tests.unit.local_http import Handler, serving

pytestmark = pytest.mark.unit


class Recorder(Handler):
    bodies: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def do_POST(self) -> None:
        self.bodies.append((self.path, json.loads(self.rfile.read(
            int(self.headers["Content-Length"])))))
        self.answer(200, {"accepted": True})


@pytest.fixture
def operator_url() -> Iterator[str]:
    Recorder.bodies.clear()
    with serving(Recorder) as url:
        yield url


@pytest.mark.parametrize(("env", "expected"), [
    ({}, None),
    ({"GOODPUT_RESUME_FROM": ""}, None),
    ({"GOODPUT_RESUME_FROM": "/c/step-20", "GOODPUT_RESUME_STEP": "20",
      "GOODPUT_RESUME_DIGEST": "sha256:ab"}, ResumePoint(20, Path("/c/step-20"), "sha256:ab")),
    ({"GOODPUT_RESUME_FROM": "/c/x"}, ResumePoint(-1, Path("/c/x"), None)),
])
def test_the_resume_point_is_what_the_operator_put_in_the_environment(
        env: dict[str, str], expected: ResumePoint | None) -> None:
    assert checkpoint.resume_point(env) == expected


def test_save_writes_atomically_then_commits_the_digest_of_what_it_wrote(
        tmp_path: Path, operator_url: str) -> None:
    seen_during_write: list[bool] = []

    def write(folder: Path) -> None:
        (folder / "model.pt").write_bytes(b"weights")
        (folder / "shard").mkdir()
        (folder / "shard" / "0.bin").write_bytes(b"optimizer")
        seen_during_write.append(checkpoint.step_dir(30, tmp_path).exists())

    reporter = Reporter(url=operator_url, token="t")
    folder, digest = checkpoint.save(30, write, root=tmp_path, reporter=reporter)
    assert seen_during_write == [False], "the final folder must not exist before it is whole"
    assert folder == tmp_path / "step-00000030" and (folder / "shard" / "0.bin").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "scratch left"
    assert digest == checkpoint.digest(folder)
    path, body = Recorder.bodies[0]
    assert path == "/v1/reports/checkpoint"
    assert (body["step"], body["path"], body["digest"]) == (30, str(folder), digest)


def test_a_verified_load_refuses_a_changed_or_missing_checkpoint(tmp_path: Path) -> None:
    folder, digest = checkpoint.save(10, lambda f: (f / "a").write_bytes(b"1"), root=tmp_path,
                                     commit=False)
    assert checkpoint.verified(ResumePoint(10, folder, digest)) == folder
    (folder / "a").write_bytes(b"2")
    with pytest.raises(CheckpointError, match="not what was committed"):
        checkpoint.verified(ResumePoint(10, folder, digest))
    with pytest.raises(CheckpointError, match="does not exist"):
        checkpoint.verified(ResumePoint(20, tmp_path / "step-00000020", digest))


def test_a_changed_checkpoint_is_reported_corrupt_before_the_load_fails(
        tmp_path: Path, operator_url: str) -> None:
    """The digest is honoured end to end: the worker says which checkpoint is bad, the
    operator never resumes from it again, and the restart after this worker's exit resumes
    from the one before."""
    folder, digest = checkpoint.save(40, lambda f: (f / "a").write_bytes(b"1"), root=tmp_path,
                                     commit=False)
    (folder / "a").write_bytes(b"bit flip")
    with pytest.raises(CheckpointError, match="not what was committed"):
        checkpoint.verified(ResumePoint(40, folder, digest),
                            Reporter(url=operator_url, token="t", job="ns/j"))
    path, body = Recorder.bodies[-1]
    assert path == "/v1/reports/checkpoint"
    assert (body["step"], body["path"], body["job"]) == (40, str(folder), "ns/j")
    assert body["corrupt"].startswith("digest sha256:") and digest in body["corrupt"]


@pytest.mark.parametrize("change", ["rename a file", "add a file", "change a byte"])
def test_the_digest_covers_names_and_contents(tmp_path: Path, change: str) -> None:
    (tmp_path / "a").write_bytes(b"xy")
    before = checkpoint.digest(tmp_path)
    if change == "rename a file":
        (tmp_path / "a").rename(tmp_path / "b")
    elif change == "add a file":
        (tmp_path / "c").write_bytes(b"")
    else:
        (tmp_path / "a").write_bytes(b"xz")
    assert checkpoint.digest(tmp_path) != before


def test_a_step_saved_again_after_a_rollback_replaces_the_old_one(tmp_path: Path) -> None:
    checkpoint.save(30, lambda f: (f / "a").write_bytes(b"corrupted"), root=tmp_path,
                    commit=False)
    folder, _ = checkpoint.save(30, lambda f: (f / "a").write_bytes(b"good"), root=tmp_path,
                                commit=False)
    assert (folder / "a").read_bytes() == b"good"


def test_no_checkpoint_directory_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOODPUT_CHECKPOINT_DIR", raising=False)
    with pytest.raises(CheckpointError, match=r"spec\.checkpoint\.dir"):
        checkpoint.step_dir(1)


def test_a_sharded_step_is_committed_once_every_rank_has_finished_its_part(
        tmp_path: Path, operator_url: str) -> None:
    """Three ranks write their parts at their own pace; rank 0 commits the whole step,
    after the slowest, with the digest of all of it."""
    import threading
    import time

    reporter = Reporter(url=operator_url, token="t")
    answers: dict[int, tuple[Path, str | None]] = {}

    def rank(index: int, delay: float) -> None:
        def write(folder: Path) -> None:
            time.sleep(delay)
            (folder / f"rank-{index}.pt").write_bytes(f"part {index}".encode())
        answers[index] = checkpoint.save_sharded(40, write, index, 3, root=tmp_path,
                                                 reporter=reporter, poll=0.01)

    threads = [threading.Thread(target=rank, args=(i, d)) for i, d in
               ((0, 0.0), (1, 0.2), (2, 0.1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    folder, digest = answers[0]
    assert folder == tmp_path / "step-00000040"
    assert sorted(p.name for p in folder.glob("rank-*.pt")) == [
        "rank-0.pt", "rank-1.pt", "rank-2.pt"]
    assert digest == checkpoint.digest(folder) and answers[1] == (folder, None)
    assert [(p, b["step"], b["digest"]) for p, b in Recorder.bodies] == [
        ("/v1/reports/checkpoint", 40, digest)]


def test_a_sharded_step_a_rank_died_writing_is_never_committed(
        tmp_path: Path, operator_url: str) -> None:
    """Rank 1 wrote half its part and died (no done-marker): rank 0 gives up after the
    timeout; the step is not in place and the operator never hears of it, so the
    previous checkpoint stays the resume point."""
    reporter = Reporter(url=operator_url, token="t")
    staging = tmp_path / ".step-00000050.staging-a0"
    staging.mkdir(parents=True)
    (staging / "rank-1.pt").write_bytes(b"half")  # and then the process died
    with pytest.raises(CheckpointError, match=r"rank\(s\) \[1\] of 2 did not finish"):
        checkpoint.save_sharded(50, lambda f: (f / "rank-0.pt").write_bytes(b"part 0"), 0, 2,
                                root=tmp_path, reporter=reporter, timeout=0.3, poll=0.01)
    assert not checkpoint.step_dir(50, tmp_path).exists()
    assert Recorder.bodies == []
