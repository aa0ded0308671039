"""The autoscaling benchmark's simulation: the HPA model and ours agree when ours runs
without its additions, and the trace is deterministic."""

from __future__ import annotations

from bench import autoscaling as bench


def test_without_panic_and_lookahead_ours_decides_exactly_as_the_hpa_model() -> None:
    rates = bench.trace(60, seed=3)
    runs = [bench.Run("hpa", bench.hpa(), 60), bench.Run("ours", bench.ours(0, False), 60)]
    for second, arrivals in enumerate(rates):
        for run in runs:
            run.step(second, arrivals)
    assert runs[0].violations == runs[1].violations
    assert runs[0].replica_seconds == runs[1].replica_seconds
    assert runs[0].actions == runs[1].actions > 0
    assert bench.trace(60, seed=3) == rates
