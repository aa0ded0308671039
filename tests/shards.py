"""What the SDK's checkpoint tests share: a worker moved to another node, and ranks saving
their parts of one sharded step at once, as a gang's ranks do."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from goodput_operator.sdk import checkpoint


def on_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, node: str) -> None:
    """The worker now runs on NODE: its node-local checkpoint folder is that node's."""
    monkeypatch.setenv("GOODPUT_CHECKPOINT_LOCAL", str(tmp_path / node))


def ranks_save(step: int, shards: dict[int, bytes], root: str, poll: float
               ) -> dict[int, tuple[Path, str | None]]:
    """Every rank of SHARDS saving its part (`rank-N.bin`) of STEP under ROOT, each in a
    thread of its own and started out of rank order: what each save_sharded returned
    (rank 0's digest once every part is down; None from the others)."""
    results: dict[int, tuple[Path, str | None]] = {}
    world = len(shards)

    def rank_saves(rank: int) -> None:
        results[rank] = checkpoint.save_sharded(
            step, lambda f: (f / f"rank-{rank}.bin").write_bytes(shards[rank]), rank, world,
            root=root, commit=False, timeout=30, poll=poll)

    threads = [threading.Thread(target=rank_saves, args=(r,)) for r in reversed(range(world))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
