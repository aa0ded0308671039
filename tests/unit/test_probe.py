"""The SDC probe and the SDK's fingerprints."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from goodput_operator.probe import workload
from goodput_operator.probe.__main__ import main
from goodput_operator.sdk.fingerprint import fingerprint


def test_clean_devices_agree_with_each_other_and_the_reference() -> None:
    result = workload.run("numpy", devices=4, size=96, iterations=3)
    assert result.ok and result.bad == []
    assert len({d.digest for d in result.devices}) == 1
    assert all(d.relative_error <= workload.REFERENCE_TOLERANCE for d in result.devices)


@pytest.mark.parametrize("victim", [0, 2, 3])
def test_an_injected_bit_flip_is_found_and_the_device_named(victim: int) -> None:
    result = workload.run("numpy", devices=4, size=96, iterations=3, inject=victim)
    assert result.bad == [victim]
    assert f"{victim} (cpu:{victim})" in result.message
    assert all(d.ok for d in result.devices if d.index != victim)


def test_the_command_exits_1_on_a_bad_device_and_prints_json(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--backend", "numpy", "--devices", "3", "--size", "64", "--json",
                 "--node", "trn2-00-1", "--inject-bitflip", "1"]) == 1
    body = json.loads(capsys.readouterr().out)
    assert body["node"] == "trn2-00-1" and body["bad"] == [1] and body["ok"] is False
    assert main(["--backend", "numpy", "--size", "64"]) == 0


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None,
                    reason="torch is installed: the GPU script covers its path")
def test_the_torch_backend_without_torch_says_so() -> None:
    assert main(["--backend", "torch", "--size", "64"]) == 2


def test_fingerprints_are_bit_exact_and_order_sensitive() -> None:
    rng = np.random.default_rng(7)
    weights = [rng.standard_normal((64, 33)).astype(np.float32),
               rng.standard_normal(7).astype(np.float16)]
    base = fingerprint(weights)
    assert base == fingerprint([w.copy() for w in weights]) and len(base) == 32
    assert fingerprint(weights[::-1]) != base
    for bit in (0, 13, 31):
        flipped = [weights[0].copy(), weights[1]]
        flipped[0].reshape(-1).view(np.uint32)[100] ^= np.uint32(1 << bit)
        assert fingerprint(flipped) != base
    swapped = weights[0].copy()
    swapped[0, 0], swapped[0, 1] = weights[0][0, 1], weights[0][0, 0]
    assert fingerprint([swapped, weights[1]]) != base
    assert fingerprint(weights[0]) == fingerprint([weights[0]])


def test_a_single_device_is_checked_against_the_reference() -> None:
    clean = workload.run("numpy", devices=1, size=96, iterations=3)
    assert clean.ok and clean.devices[0].relative_error < 1e-4
    flipped = workload.run("numpy", devices=1, size=96, iterations=3, inject=0)
    assert flipped.bad == [0] and "float64 reference" in flipped.message
