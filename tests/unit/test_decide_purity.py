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


SRC = DECIDE.parent
# package -> the packages of ours it must not import: the layers, bottom up
LAYERS = {
    "api": ("decide", "controllers", "operator", "simulate"),
    "decide": ("controllers", "operator", "sandbox"),
    "simulate": ("controllers", "operator"),  # its fleet files are the sandbox's
    "controllers": ("operator", "sandbox"),
}


@pytest.mark.parametrize(("package", "forbidden"), sorted(LAYERS.items()))
def test_each_layer_imports_only_those_below_it(package: str, forbidden: tuple[str, ...]
                                                ) -> None:
    """No cycle between layers: the cache and the controllers never import the process
    that runs them (operator/ registers the kopf handlers and imports them)."""
    found = []
    for path in sorted((SRC / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.relative_to(SRC)}: {name}" for name in names
                      if name.split(".")[:2] in (["goodput_operator", f] for f in forbidden)]
    assert found == []
