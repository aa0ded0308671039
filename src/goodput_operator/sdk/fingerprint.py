"""A cheap, bit-exact fingerprint of model state (parameters, or gradients after
all-reduce), for cross-replica SDC checks: data-parallel replicas must agree bit for bit.

Two checksums over the tensors' raw bits, read as 32-bit words (Fletcher-style): the plain
sum changes with any single bit flip; the position-weighted sum also catches values that
moved. Both are integer reductions, so they run on the device (torch) or vectorised
(numpy) and give the same answer however the reduction is ordered. Neither numpy nor torch
is imported unless a tensor of theirs is passed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MOD = 1 << 64
CHUNK = 1 << 22  # words per reduction: bounds the temporary memory
WEIGHT_PERIOD = 65521  # largest prime below 2**16: position weights 1..65521


def fingerprint(tensors: Any | Iterable[Any]) -> str:
    """32 hex digits for one tensor/array or an iterable of them (order matters)."""
    items = [tensors] if hasattr(tensors, "shape") else list(tensors)
    plain, weighted, offset = 0, 0, 0
    for item in items:
        if type(item).__module__.startswith("torch"):
            a, b, n = _torch_sums(item, offset)
        else:
            a, b, n = _numpy_sums(item, offset)
        plain, weighted, offset = (plain + a) % MOD, (weighted + b) % MOD, offset + n
    return f"{plain:016x}{weighted:016x}"


def _numpy_sums(array: Any, offset: int) -> tuple[int, int, int]:
    import numpy as np

    raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    if raw.size % 4:
        raw = np.concatenate([raw, np.zeros(4 - raw.size % 4, np.uint8)])
    words = raw.view(np.uint32)
    plain = weighted = 0
    for start in range(0, words.size, CHUNK):
        chunk = words[start:start + CHUNK].astype(np.uint64)
        weights = (np.arange(offset + start, offset + start + chunk.size, dtype=np.uint64)
                   % WEIGHT_PERIOD) + 1
        plain += int(chunk.sum(dtype=np.uint64))
        weighted += int((chunk * weights).sum(dtype=np.uint64))
    return plain % MOD, weighted % MOD, int(words.size)


def _torch_sums(tensor: Any, offset: int) -> tuple[int, int, int]:
    import torch

    flat = tensor.detach().contiguous().reshape(-1)
    raw = flat.view(torch.uint8)
    if raw.numel() % 4:
        raw = torch.cat([raw, raw.new_zeros(4 - raw.numel() % 4)])
    words = raw.view(torch.int32)
    plain = weighted = 0
    for start in range(0, words.numel(), CHUNK):
        # int32 -> int64 keeps the bits as a signed value; add 2**32 where negative so the
        # words read as unsigned, as in the numpy path (sums wrap mod 2**64 on both)
        chunk = words[start:start + CHUNK].to(torch.int64)
        chunk = torch.where(chunk < 0, chunk + (1 << 32), chunk)
        weights = (torch.arange(offset + start, offset + start + chunk.numel(),
                                device=chunk.device, dtype=torch.int64) % WEIGHT_PERIOD) + 1
        plain += int(chunk.sum().item())
        weighted += int((chunk * weights).sum().item())
    return plain % MOD, weighted % MOD, int(words.numel())
