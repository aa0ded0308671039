"""decide/ reads as a list of policy steps: no function over 60 lines, none with more than
6 parameters, and none that writes into its arguments (an assignment to a parameter's
item or attribute, or an augmented one, or a delete). A decision returns values; what a
decision leaves for the later ones in the same pass goes through named methods of the
pass's ledger (Snapshot.mark, Memo.recall, the fleets' trial bindings).

Functions not there yet are listed in OWED with why; the list may only shrink: a function
fixed, or a new one that breaks a rule, fails this test until the list says so."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
DECIDE = Path(__file__).resolve().parents[2] / "src" / "goodput_operator" / "decide"
MAX_LINES = 60
MAX_PARAMETERS = 6  # self and cls not counted

# function -> the rules it breaks still, as `audit` names them
OWED: dict[str, set[str]] = {}


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        found = [node.target]
    elif isinstance(node, ast.Delete):
        found = node.targets
    else:
        return []
    return [t for target in found
            for t in (target.elts if isinstance(target, ast.Tuple) else [target])]


def audit(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The rules FUNCTION breaks: lines, parameters, writes."""
    args = function.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
             if a.arg not in ("self", "cls")]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    broken = set()
    if function.end_lineno is not None and \
            function.end_lineno - function.lineno + 1 > MAX_LINES:
        broken.add("lines")
    if len(names) > MAX_PARAMETERS:
        broken.add("parameters")
    for node in ast.walk(function):
        for target in _targets(node):
            if isinstance(target, (ast.Subscript, ast.Attribute)) and _root(target) in names:
                broken.add("writes")
    return broken


def found() -> dict[str, set[str]]:
    broken = {}
    for path in sorted(DECIDE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and audit(node):
                broken[f"{path.stem}.{node.name}"] = audit(node)
    return broken


def test_decide_reads_as_short_steps_that_return_values() -> None:
    assert found() == OWED


@pytest.mark.parametrize(("source", "broken"), [
    ("def f(a, b):\n    a['k'] = b\n", {"writes"}),
    ("def f(a):\n    a.x.y = 1\n", {"writes"}),
    ("def f(a):\n    a.n += 1\n", {"writes"}),
    ("def f(a):\n    del a[0]\n", {"writes"}),
    ("def f(a):\n    b = dict(a)\n    b['k'] = 1\n    return b\n", set()),
    ("def f(a, b, c, d, e, f, g):\n    return a\n", {"parameters"}),
    ("def f(self, a, b, c, d, e, f):\n    return a\n", set()),
    ("def f():\n" + "    x = 1\n" * 60, {"lines"}),
])
def test_the_audit_sees_each_rule_broken(source: str, broken: set[str]) -> None:
    [function] = ast.parse(source).body
    assert isinstance(function, ast.FunctionDef)
    assert audit(function) == broken
