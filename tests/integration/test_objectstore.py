"""The SDK's checkpoints on a real S3-compatible server (versitygw): a save committed in
the store only by its commit object, a resume from another node fetched and checked file
by file, the node-local copy taken when it is the committed one, ranks writing their
shards from different nodes, and what the store no longer holds as committed refused."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from goodput_operator.sdk import checkpoint
from goodput_operator.sdk.checkpoint import CheckpointError, ResumePoint
from goodput_operator.sdk.objectstore import ObjectStore, ObjectStoreError
from goodput_operator.sdk.tiers import COMMIT
from tests.shards import on_node, ranks_save

pytestmark = pytest.mark.integration
URL = "s3://ckpt/llama"


@pytest.fixture
def store(object_store: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ObjectStore:
    """The worker's environment: the Secret's keys, a node-local folder of its own."""
    for key, value in object_store.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GOODPUT_CHECKPOINT_LOCAL", str(tmp_path / "node-a"))
    found = ObjectStore.from_env()
    found.create_bucket("ckpt")
    return found


def test_a_save_is_committed_by_its_commit_object_and_resumes_elsewhere_bit_for_bit(
        store: ObjectStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    state = os.urandom(3 << 20)
    folder, digest = checkpoint.save(120, lambda f: (f / "model.bin").write_bytes(state),
                                     root=URL, commit=False)
    assert folder.is_relative_to(tmp_path / "node-a") and digest.startswith("sha256-manifest:")
    assert sorted(store.keys("ckpt", "llama/step-00000120/")) == \
        ["llama/step-00000120/.goodput-commit", "llama/step-00000120/model.bin"]
    point = ResumePoint(120, f"{URL}/step-00000120", digest)
    assert checkpoint.verified(point, report=False) == folder  # the node-local tier

    on_node(monkeypatch, tmp_path, "node-b")  # a replacement: nothing node-local
    fetched = checkpoint.verified(point, report=False)
    assert fetched.is_relative_to(tmp_path / "node-b")
    assert (fetched / "model.bin").read_bytes() == state


def test_a_background_save_commits_once_uploaded(store: ObjectStore) -> None:
    committed: list[tuple[int, str, str | None]] = []

    class Recorder:
        def commit_checkpoint(self, step: int, path: str, digest: str | None = None,
                              save_seconds: float | None = None) -> dict[str, Any]:
            committed.append((step, path, digest))
            return {}

    for step in (1, 2, 3):
        checkpoint.save(step, lambda f, s=step: (f / "w.bin").write_bytes(bytes([s]) * 1000),
                        root=URL, reporter=Recorder(), background=True)  # type: ignore[arg-type]
    checkpoint.wait_uploads()
    assert [c[:2] for c in committed] == [(s, f"{URL}/step-{s:08d}") for s in (1, 2, 3)]
    for _, path, _ in committed:
        assert store.exists("ckpt", f"{path.removeprefix('s3://ckpt/')}/{COMMIT}")


def test_ranks_on_different_nodes_commit_one_sharded_step(
        store: ObjectStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    shards = {rank: os.urandom(1 << 16) for rank in range(3)}
    results = ranks_save(7, shards, URL, poll=0.05)
    digest = results[0][1]
    assert digest is not None and results[1][1] is None and results[2][1] is None
    on_node(monkeypatch, tmp_path, "node-c")
    fetched = checkpoint.verified(ResumePoint(7, f"{URL}/step-00000007", digest), report=False)
    assert {p.name: p.read_bytes() for p in fetched.iterdir()} == \
        {f"rank-{r}.bin": data for r, data in shards.items()}


def test_what_the_store_holds_no_longer_as_committed_is_refused(
        store: ObjectStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _, digest = checkpoint.save(9, lambda f: (f / "model.bin").write_bytes(b"good" * 100),
                                root=URL, commit=False)
    point = ResumePoint(9, f"{URL}/step-00000009", digest)
    store.put_bytes("ckpt", "llama/step-00000009/model.bin", b"bad")  # changed afterwards
    on_node(monkeypatch, tmp_path, "node-d")
    with pytest.raises(CheckpointError, match="differ from the commit object"):
        checkpoint.verified(point, report=False)
    with pytest.raises(CheckpointError, match="never committed"):
        checkpoint.verified(ResumePoint(10, f"{URL}/step-00000010", digest), report=False)
    with pytest.raises(CheckpointError, match="the operator's record"):
        checkpoint.verified(ResumePoint(9, point.path, "sha256-manifest:00"), report=False)


def test_with_a_shared_folder_a_step_is_committed_there_and_in_the_store_and_read_there_first(
        store: ObjectStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """checkpoint.sharedDir, the tier between the node-local copy and the store: a
    replacement reads the step from the shared folder (the store's copy is not needed);
    a shared copy changed since its commit is passed over for the store's, bit for bit."""
    monkeypatch.setenv("GOODPUT_CHECKPOINT_SHARED", str(tmp_path / "fsx"))
    states = {step: os.urandom(1 << 20) for step in (30, 31)}
    points = {}
    for step, state in states.items():
        _, digest = checkpoint.save(step, lambda f, s=state: (f / "model.bin").write_bytes(s),
                                    root=URL, commit=False)
        points[step] = ResumePoint(step, f"{URL}/step-{step:08d}", digest)
        shared = tmp_path / "fsx" / "llama" / f"step-{step:08d}"
        assert (shared / "model.bin").read_bytes() == state and (shared / COMMIT).is_file()
        assert store.exists("ckpt", f"llama/step-{step:08d}/{COMMIT}")

    store.delete("ckpt", "llama/step-00000030/model.bin")
    on_node(monkeypatch, tmp_path, "node-e")
    fetched = checkpoint.verified(points[30], report=False)
    assert (fetched / "model.bin").read_bytes() == states[30]

    (tmp_path / "fsx" / "llama" / "step-00000031" / "model.bin").write_bytes(b"bad")
    on_node(monkeypatch, tmp_path, "node-f")
    fetched = checkpoint.verified(points[31], report=False)
    assert (fetched / "model.bin").read_bytes() == states[31]


def test_wrong_credentials_are_refused_by_the_server(object_store: Any) -> None:
    wrong = ObjectStore(object_store.url, object_store.access_key, "not-the-secret")
    with pytest.raises(ObjectStoreError) as refused:
        wrong.create_bucket("ckpt")
    assert refused.value.status == 403
