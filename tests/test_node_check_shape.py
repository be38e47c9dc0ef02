"""check/node.py's run_check is named steps, none long (it was one ~116-line function with a nested run/rerun)."""

from __future__ import annotations

import ast
from pathlib import Path

NODE = Path(__file__).resolve().parent.parent / "src" / "nodemap" / "check" / "node.py"
LONGEST = 50  # lines of one function, its docstring and signature included


def _functions(tree: ast.AST):
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield n


def test_no_function_of_the_node_check_is_long():
    long = {f.name: f.end_lineno - f.lineno + 1 for f in _functions(ast.parse(NODE.read_text()))
            if f.end_lineno - f.lineno + 1 > LONGEST}
    assert long == {}, f"split these into named steps: {long}"


def test_run_check_nests_no_step():
    (run_check,) = (f for f in _functions(ast.parse(NODE.read_text())) if f.name == "run_check")
    nested = [f.name for f in _functions(run_check) if f is not run_check]
    assert nested == [], f"name them at module level: {nested}"
