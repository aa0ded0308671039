"""Every goodput.dev name lives in goodput_operator.names: code and tests import it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from goodput_operator import names

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
# a label, annotation, taint, gate or finalizer, alone or in a selector; not the API
# version and not prose
NAME = re.compile(r"^(goodput\.dev/(?!v\d)[a-z-]+)(=|-$|$)")
ENV = re.compile(r"^GOODPUT_[A-Z_]+$")
WORKER_MODULES = ("resources", "sdk", "probe", "controllers", "decide", "health", "topology")


def spelled(path: Path, pattern: re.Pattern[str]) -> list[str]:
    """String constants in PATH matching PATTERN, docstrings aside."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef |
                                ast.ClassDef) and node.body
                  and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings and pattern.match(node.value)]


def test_names_are_ours_and_distinct() -> None:
    values = {k: v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)}
    kube = {k: v for k, v in values.items() if not k.startswith("ENV_")}
    assert all(names.PREFIX + "/" in v for v in kube.values() if v != names.PREFIX)
    assert all(ENV.match(v) for k, v in values.items() if k.startswith("ENV_"))
    # one string per meaning; the domain is a node label and a pod annotation alike
    shared = {v for v in kube.values() if list(kube.values()).count(v) > 1}
    assert shared == {names.NODE_DOMAIN_LABEL} == {names.DOMAIN_ANNOTATION}


@pytest.mark.parametrize("folder", ["src/goodput_operator", "tests", "bench"])
def test_no_module_spells_a_name_out(folder: str) -> None:
    found = [hit for path in sorted((ROOT / folder).rglob("*.py"))
             if path.name != "names.py" and "sandbox" not in path.parts
             for hit in spelled(path, NAME)]
    assert found == [], "use goodput_operator.names"


def test_worker_environment_comes_from_names() -> None:
    found = [hit for module in WORKER_MODULES
             for path in sorted((ROOT / "src/goodput_operator" / module).rglob("*.py"))
             for hit in spelled(path, ENV)]
    assert found == [], "use goodput_operator.names.ENV_*"
