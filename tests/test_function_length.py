"""No function body in contagent/ is over :data:`LIMIT` lines.

A body is counted from its first statement after the docstring to its last line, so a
long signature (a typer command's options) does not count; nested functions count in
their enclosing function and on their own.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

LIMIT = 80


def long_functions(root: Path, limit: int = LIMIT) -> list[str]:
    """``path:line name (N lines)`` for every function under ``root`` whose body is longer."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            body = node.body
            if len(body) > 1 and isinstance(body[0], ast.Expr):
                if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                    body = body[1:]
            lines = (body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1
            if lines > limit:
                where = path.relative_to(root.parent) if root.parent in path.parents else path
                found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_body_is_over_the_limit():
    offenders = long_functions(REPO / "contagent")
    assert not offenders, f"function bodies over {LIMIT} lines: " + "; ".join(offenders)


def test_the_check_counts_the_body_and_not_the_docstring_or_signature(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    long_body = "\n".join(f"    x{i} = {i}" for i in range(6))
    (pkg / "m.py").write_text(
        "def short(\n" + "    a: int,\n" * 20 + ") -> None:\n"
        '    """A docstring\n\n    of several\n    lines."""\n' + long_body + "\n\n\n"
        "def long():\n" + long_body + "\n    y = 1\n\n\n"
        "class C:\n    async def method(self):\n" + long_body.replace("    ", "        ") + "\n"
    )
    assert long_functions(pkg, limit=6) == ["pkg/m.py:35 long (7 lines)"]
    assert long_functions(pkg, limit=5) == [
        "pkg/m.py:1 short (6 lines)", "pkg/m.py:35 long (7 lines)", "pkg/m.py:46 method (6 lines)",
    ]  # fmt: skip
