"""The decision core stands alone: no kopf, no Kubernetes client, no wall clock."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
DECIDE = Path(__file__).resolve().parents[2] / "src" / "goodput_operator" / "decide"


def test_decide_imports_neither_kopf_nor_the_kubernetes_client() -> None:
    probe = ("import sys, goodput_operator.decide\n"
             "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
             "('kopf', 'kubernetes', 'aiohttp', 'prometheus_client'))\n"
             "print(','.join(bad))")
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert found == ""


@pytest.mark.parametrize("module", sorted(p.name for p in DECIDE.glob("*.py")))
def test_decide_never_reads_the_wall_clock(module: str) -> None:
    """Time comes in the snapshot (Snapshot.clock), so a case replays exactly."""
    tree = ast.parse((DECIDE / module).read_text())
    calls = {f"{node.func.value.id}.{node.func.attr}" for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and isinstance(node.func.value, ast.Name)}
    assert not calls & {"time.time", "datetime.now", "datetime.utcnow", "time.monotonic"}
