"""One meaning per name: a class name is defined in one module of ``contagent/``, and a
module's file name is found once.

A reader meets a name without its package: a traceback's last frame, an editor's file search,
``from x import Plan`` in a diff. Two classes of one name, or two ``tokens.py``, make them
ask which one; so every class name and every module file name is unique in the package.
``__init__.py`` and ``__main__.py`` are the exceptions: Python gives them their meaning.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.helpers import REPO

#: File names Python itself gives a meaning, so they repeat in every package.
PACKAGE_FILES = frozenset({"__init__.py", "__main__.py"})


def _sources(root: Path) -> list[Path]:
    return sorted((root / "contagent").rglob("*.py"))


def _where(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def repeated_class_names(root: Path = REPO) -> dict[str, list[str]]:
    """class name -> the modules that define it, for each name defined in more than one."""
    found: defaultdict[str, set[str]] = defaultdict(set)
    for path in _sources(root):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                found[node.name].add(_where(path, root))
    return {name: sorted(where) for name, where in sorted(found.items()) if len(where) > 1}


def repeated_file_names(root: Path = REPO) -> dict[str, list[str]]:
    """file name -> its modules, for each module file name found more than once."""
    found: defaultdict[str, list[str]] = defaultdict(list)
    for path in _sources(root):
        if path.name not in PACKAGE_FILES:
            found[path.name].append(_where(path, root))
    return {name: where for name, where in sorted(found.items()) if len(where) > 1}


def test_the_walk_sees_the_package() -> None:
    sources = _sources(REPO)
    assert len(sources) > 100
    assert any(p.name == "rows.py" for p in sources)


def test_no_class_name_is_defined_in_two_modules() -> None:
    assert repeated_class_names() == {}


def test_no_two_modules_share_a_file_name() -> None:
    assert repeated_file_names() == {}


def _write(root: Path, relative: str, text: str = "") -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_checks_catch_a_repeated_class_and_a_repeated_file_name(tmp_path: Path) -> None:
    _write(tmp_path, "contagent/__init__.py")
    _write(tmp_path, "contagent/a/__init__.py")
    _write(tmp_path, "contagent/a/tokens.py", "class Plan:\n    class Inner: ...\n")
    _write(tmp_path, "contagent/b/__init__.py")
    _write(tmp_path, "contagent/b/tokens.py", "def f():\n    class Plan: ...\n")
    _write(tmp_path, "contagent/b/other.py", "class Inner: ...\nclass Own: ...\nclass Own: ...\n")
    assert repeated_class_names(tmp_path) == {
        "Inner": ["contagent/a/tokens.py", "contagent/b/other.py"],
        "Plan": ["contagent/a/tokens.py", "contagent/b/tokens.py"],
    }
    assert repeated_file_names(tmp_path) == {
        "tokens.py": ["contagent/a/tokens.py", "contagent/b/tokens.py"],
    }
