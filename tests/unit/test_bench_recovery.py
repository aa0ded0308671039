"""The recovery benchmark's arithmetic: medians per phase and the Kubernetes-defaults
baseline computed from the same trials."""

from __future__ import annotations

import math

import pytest
from bench.recovery import TOLERATION_SECONDS, summarize

pytestmark = pytest.mark.unit


def test_the_baseline_adds_the_toleration_to_the_observed_taint_and_our_restart() -> None:
    trials = [{"detection": 55.0, "replacement": 0.1, "restart": 2.0, "checkpoint_load": 8.0,
               "total": 65.1, "k8s_taint": 50.0},
              {"detection": 57.0, "replacement": 0.1, "restart": 3.0, "checkpoint_load": 9.0,
               "total": 69.1, "k8s_taint": math.nan}]
    summary = summarize(trials)
    assert summary["total"]["median"] == 67.1
    assert summary["checkpoint_load"]["median"] == 8.5
    assert summary["baseline_k8s_defaults"]["median"] == 50.0 + TOLERATION_SECONDS + 2 + 8


def test_kwok_trials_have_no_checkpoint_phase() -> None:
    summary = summarize([{"detection": 5.0, "replacement": 0.1, "restart": 1.0, "total": 6.1,
                          "k8s_taint": 0.5}])
    assert summary["checkpoint_load"] == {}
    assert summary["baseline_k8s_defaults"]["median"] == 0.5 + TOLERATION_SECONDS + 1.0
