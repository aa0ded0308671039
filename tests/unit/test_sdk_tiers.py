"""The durable tiers of a checkpoint on an object store, in order: a step committed in each
by its own commit object, a resume taking the first that holds it as committed, and a tier
holding something else passed over, never loaded. Two SharedFolders stand in for the
shared filesystem and the store (the store itself: tests/integration/test_objectstore.py,
on a real S3-compatible server)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from goodput_operator.sdk import checkpoint, tiers
from goodput_operator.sdk.checkpoint import CheckpointError, ResumePoint
from goodput_operator.sdk.objectstore import ObjectStoreError
from goodput_operator.sdk.shared import SharedFolder
from tests.shards import on_node, ranks_save

pytestmark = pytest.mark.unit
URL = "s3://ckpt/llama"
STEP = "llama/step-00000005"


@pytest.fixture
def durable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[SharedFolder]:
    found = [SharedFolder(tmp_path / "fsx"), SharedFolder(tmp_path / "store")]
    monkeypatch.setattr(tiers, "durable_tiers", lambda: list(found))
    on_node(monkeypatch, tmp_path, "node-a")
    return found


def saved(state: bytes) -> tuple[ResumePoint, Path]:
    folder, digest = checkpoint.save(5, lambda f: (f / "model.bin").write_bytes(state),
                                     root=URL, commit=False)
    return ResumePoint(5, f"{URL}/step-00000005", digest), folder


def test_a_step_is_committed_in_every_durable_tier_by_its_own_commit_object(
        durable: list[SharedFolder]) -> None:
    state = os.urandom(1 << 16)
    saved(state)
    for tier in durable:
        assert tier.get_bytes("ckpt", f"{STEP}/model.bin") == state
        assert b"sha256-manifest:" in tier.get_bytes("ckpt", f"{STEP}/{tiers.COMMIT}")


@pytest.mark.parametrize("shared, fetched_from", [
    ("kept", "fsx"),          # the faster durable tier holds it as committed
    ("removed", "store"),     # its file gone from the shared filesystem: the store
    ("changed", "store"),     # changed there since: passed over, the store
    ("uncommitted", "store"),  # its commit object lost: never committed there
])
def test_a_replacement_resumes_from_the_first_tier_that_holds_the_step_as_committed(
        durable: list[SharedFolder], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        shared: str, fetched_from: str) -> None:
    state = os.urandom(1 << 16)
    point, _ = saved(state)
    files = tmp_path / "fsx" / STEP
    if shared == "removed":
        (files / "model.bin").unlink()
    elif shared == "changed":
        (files / "model.bin").write_bytes(b"bad")
    elif shared == "uncommitted":
        (files / tiers.COMMIT).unlink()
    if fetched_from == "fsx":  # the store's copy gone: only the shared one can serve
        for file in (tmp_path / "store" / STEP).iterdir():
            file.unlink()
    on_node(monkeypatch, tmp_path, "node-b")
    fetched = checkpoint.verified(point, report=False)
    assert (fetched / "model.bin").read_bytes() == state
    assert fetched.is_relative_to(tmp_path / "node-b")


def test_a_step_no_tier_holds_as_committed_is_refused_as_corrupt_if_one_holds_other_bytes(
        durable: list[SharedFolder], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    point, _ = saved(b"good" * 100)
    (tmp_path / "fsx" / STEP / "model.bin").write_bytes(b"bad")
    (tmp_path / "store" / STEP / tiers.COMMIT).unlink()
    on_node(monkeypatch, tmp_path, "node-c")
    with pytest.raises(CheckpointError, match=r"in the shared folder .*fsx differ from the"):
        checkpoint.verified(point, report=False)
    (tmp_path / "fsx" / STEP / tiers.COMMIT).unlink()
    with pytest.raises(CheckpointError, match="never committed there"):
        checkpoint.verified(point, report=False)


def test_ranks_commit_one_sharded_step_in_each_tier(durable: list[SharedFolder],
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    shards = {rank: os.urandom(1 << 12) for rank in range(3)}
    results = ranks_save(5, shards, URL, poll=0.01)
    digest = results[0][1]
    assert digest is not None and results[1][1] is None
    for tier in durable:
        assert tier.get_bytes("ckpt", f"{STEP}/{tiers.COMMIT}")
    (tmp_path / "fsx" / STEP / "rank-1.bin").unlink()   # the store must serve it then
    on_node(monkeypatch, tmp_path, "node-d")
    fetched = checkpoint.verified(ResumePoint(5, f"{URL}/step-00000005", digest), report=False)
    assert {p.name: p.read_bytes() for p in fetched.iterdir()} == \
        {f"rank-{r}.bin": data for r, data in shards.items()}


def test_a_key_never_leaves_the_shared_folder(tmp_path: Path) -> None:
    folder = SharedFolder(tmp_path / "fsx")
    with pytest.raises(ObjectStoreError, match="outside"):
        folder.put_bytes("ckpt", "../escape", b"x")
    with pytest.raises(ObjectStoreError) as missing:
        folder.get_bytes("ckpt", "llama/none")
    assert missing.value.status == 404
