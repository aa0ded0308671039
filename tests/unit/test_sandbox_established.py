"""Waiting for CRDs: `kubectl wait` fails at once on a CRD whose status the API server has
not written yet; the sandbox's wait retries that, and only that."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from goodput_operator.sandbox import cluster

pytestmark = pytest.mark.unit

NOT_YET = ("error: .status.conditions accessor error: <nil> is of the type <nil>, "
           "expected []interface{}")


def kubectl_answering(monkeypatch: pytest.MonkeyPatch, *answers: tuple[int, str]
                      ) -> list[tuple[str, ...]]:
    calls: list[tuple[str, ...]] = []
    left = list(answers)

    def fake(kubeconfig: Path, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        code, stderr = left.pop(0)
        return subprocess.CompletedProcess(args, code, "", stderr)
    monkeypatch.setattr(cluster, "run_kubectl", fake)
    monkeypatch.setattr(cluster.time, "sleep", lambda seconds: None)
    return calls


def test_a_crd_without_a_status_yet_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = kubectl_answering(monkeypatch, (1, NOT_YET), (1, NOT_YET), (0, ""))
    cluster.wait_established(Path("kc"), "crd/a.example.com")
    assert len(calls) == 3
    assert all(c[:2] == ("wait", "--for=condition=Established") for c in calls)


def test_any_other_failure_is_raised_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = kubectl_answering(monkeypatch, (1, 'crd "a.example.com" not found'))
    with pytest.raises(cluster.SandboxError, match="not found"):
        cluster.wait_established(Path("kc"), "crd/a.example.com")
    assert len(calls) == 1


def test_a_status_that_never_comes_ends_at_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    kubectl_answering(monkeypatch, (1, NOT_YET), (1, NOT_YET))
    with pytest.raises(cluster.SandboxError, match="accessor error"):
        cluster.wait_established(Path("kc"), "crd/a.example.com", timeout=0)
