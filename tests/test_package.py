"""The package's shape: imports go one way and never in a loop, and nothing in it
reaches into this repository's folders.

The imports are read with ``ast`` from every ``contagent/**/*.py``, at module level
and inside functions alike (a deferred import is still a dependency).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO

PACKAGE = REPO / "contagent"

#: The stages in the order they may import each other: a module may import its own layer
#: or a later one, never an earlier one. Every top-level module or package is placed here; a
#: dotted name places a part of a package apart from the rest of it (its longest placed
#: prefix decides), so that inside ``export`` the formats never import the exporter that
#: writes them.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"cli", "__main__"}),
    frozenset({"engine"}),
    frozenset(
        {"runner", "proxy", "export", "validate", "hub", "viewer", "testing", "rawlog.compact"}
    ),
    frozenset({"export.derive", "export.formats", "agents", "charts"}),
    frozenset(
        {
            "rules",
            "core",
            "rawlog",
            "wire",
            "layout",
            "charts.png",
            "model_schema",
            "versions",
            "errors",
            "_loopthread",
            "textfile",
            "http_site",
        }
    ),
)
_PLACED = frozenset().union(*LAYERS)


def _module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(root: Path = REPO) -> dict[str, Path]:
    return {_module_name(p, root): p for p in sorted((root / "contagent").rglob("*.py"))}


def _imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(module, line) for every ``contagent`` module that ``name`` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import sub`` depends on the submodule; ``from mod import name`` on mod
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:  # ``import contagent.a.b`` names a.b's module
                target = target.rpartition(".")[0]
            if target and target != "contagent":
                yield target, node.lineno


def import_graph(root: Path = REPO) -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first import}."""
    known = _modules(root)
    graph: dict[str, dict[str, int]] = {}
    for name, path in known.items():
        edges: dict[str, int] = {}
        for target, line in _imported(name, path, known):
            if target != name:
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One import loop (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def _top(module: str) -> str:
    """The top-level module or package of ``contagent`` that ``module`` is in."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _stage(module: str) -> str:
    """The longest placed prefix of ``module`` (below ``contagent``), else its top level."""
    parts = module.split(".")[1:]
    for end in range(len(parts), 0, -1):
        if (key := ".".join(parts[:end])) in _PLACED:
            return key
    return _top(module)


def _layer(module: str) -> int:
    stage = _stage(module)
    for rank, layer in enumerate(LAYERS):
        if stage in layer:
            return rank
    raise AssertionError(f"{module}: place {stage!r} in a layer of tests/test_package.py LAYERS")


def upward_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    """``module:line imports target`` for each import that goes up the layer order."""
    return [
        f"{module}:{line} imports {target}"
        for module, edges in sorted(graph.items())
        if module != "contagent"
        for target, line in sorted(edges.items())
        if _layer(target) < _layer(module)
    ]


def test_the_package_imports_without_a_loop() -> None:
    graph = import_graph()
    assert len(graph) > 50 and sum(map(len, graph.values())) > 100  # the walk saw the package
    cycle = find_cycle(graph)
    assert cycle is None, "import loop: " + " -> ".join(cycle or [])


def test_imports_follow_the_layer_order() -> None:
    assert upward_imports(import_graph()) == []


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


#: What the recorder never imports: it records facts, and the exporter judges them.
RECORDER_NEVER_IMPORTS = frozenset({"rules", "export", "validate"})


def test_the_recording_proxy_does_not_import_the_export_rules() -> None:
    graph = import_graph()
    proxy = {m: edges for m, edges in graph.items() if _top(m) == "proxy"}
    assert len(proxy) > 5
    found = [
        f"{module}:{line} imports {target}"
        for module, edges in sorted(proxy.items())
        for target, line in sorted(edges.items())
        if _top(target) in RECORDER_NEVER_IMPORTS
    ]
    assert found == []


def test_the_checks_catch_a_loop_and_an_upward_import(tmp_path: Path) -> None:
    _write(tmp_path, "contagent/__init__.py", "")
    _write(tmp_path, "contagent/runner/__init__.py", "")
    _write(tmp_path, "contagent/runner/a.py", "from contagent.runner import b\n")
    _write(tmp_path, "contagent/runner/b.py", "def f():\n    from .a import x\n")
    _write(tmp_path, "contagent/core/rows.py", "import contagent.runner.a\n")
    _write(tmp_path, "contagent/export/exporter.py", "")
    _write(tmp_path, "contagent/export/formats/trl.py", "from contagent.export import exporter\n")
    graph = import_graph(tmp_path)
    assert find_cycle(graph) == ["contagent.runner.a", "contagent.runner.b", "contagent.runner.a"]
    assert upward_imports(graph) == [
        "contagent.core.rows:1 imports contagent.runner.a",
        "contagent.export.formats.trl:1 imports contagent.export.exporter",
    ]
    with pytest.raises(AssertionError, match="place 'newstage'"):
        _layer("contagent.newstage.x")


# --- nothing under contagent/ reaches into the repository -----------------------------------

#: Reads of the repository next to the package: the docker/ build context of `contagent build`.
READS_BESIDE_PACKAGE = {"contagent.runner.images.build"}
#: Repository folders that a module names as a default path.
REPO_FOLDERS = ("data/rollouts", "schemas/", "tests/", "tools/", "benchmarks/")


def _climb(node: ast.expr) -> int | None:
    """How many folders ``Path(__file__)...`` climbs above the file's own folder, or None."""
    ups = 0
    while True:
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            ups, node = ups + 1, node.value
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "parents"
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, int)
        ):
            ups, node = ups + node.slice.value + 1, node.value.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value  # .resolve(), .absolute()
        elif isinstance(node, ast.Call) and any(
            isinstance(a, ast.Name) and a.id == "__file__" for a in node.args
        ):
            return ups - 1  # Path(__file__).parent is the file's own folder
        else:
            return None


def repository_references(root: Path = REPO) -> list[str]:
    found = []
    for name, path in _modules(root).items():
        depth = name.count(".") - (path.name != "__init__.py") + 1  # folders below the repo root
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and n.body
            and isinstance(n.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            climbed = _climb(node) if isinstance(node, ast.expr) else None
            if climbed is not None and climbed >= depth and name not in READS_BESIDE_PACKAGE:
                found.append(f"{name}:{node.lineno} leaves the package")
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and node.value.startswith(REPO_FOLDERS)
            ):
                found.append(f"{name}:{node.lineno} names {node.value!r}")
    return sorted(set(found))


def test_nothing_in_the_package_reaches_into_the_repository() -> None:
    assert repository_references() == []


def test_the_repository_check_catches_a_generator(tmp_path: Path) -> None:
    _write(tmp_path, "contagent/__init__.py", "")
    _write(
        tmp_path,
        "contagent/gen.py",
        '"""Writes data/rollouts."""\nfrom pathlib import Path\n'
        'OUT = Path(__file__).resolve().parent.parent / "schemas"\n'
        'DEFAULT = Path("data/rollouts")\nHERE = Path(__file__).parent / "templates"\n',
    )
    _write(
        tmp_path,
        "contagent/sub/deep.py",
        "from pathlib import Path\nUP = Path(__file__).parents[2]\n",
    )
    assert repository_references(tmp_path) == [
        "contagent.gen:3 leaves the package",
        "contagent.gen:4 names 'data/rollouts'",
        "contagent.sub.deep:2 leaves the package",
    ]
