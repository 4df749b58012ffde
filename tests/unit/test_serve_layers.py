"""Inside trtserve/serve/ no two parts import each other, at any distance: each top-level module and
each sub-package is one node, and every import counts (lazy ones inside functions and those under
TYPE_CHECKING too). A loop is a sign that a type lives in the wrong place (STYLE.md)."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

SERVE = Path(__file__).resolve().parents[2] / "trtserve" / "serve"
PREFIX = "trtserve.serve."


def _node(root: Path, path: Path) -> str:
    """serve/app.py -> "app"; serve/openai/routes.py -> "openai"."""
    return path.relative_to(root).parts[0].removesuffix(".py")


def _module(root: Path, path: Path) -> list[str]:
    parts = ["trtserve", *path.relative_to(root.parent).with_suffix("").parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def _targets(root: Path, path: Path, node: ast.AST) -> list[str]:
    """The modules an import statement names, absolute (`from . import x` names the module x too)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        package = _module(root, path)
        if path.name != "__init__.py":
            package = package[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    return [base] + [f"{base}.{a.name}" for a in node.names]


def serve_graph(root: Path = SERVE) -> dict[str, dict[str, set[str]]]:
    """node -> imported node -> "file:line" of each import."""
    graph: dict[str, dict[str, set[str]]] = {}
    for path in sorted(root.rglob("*.py")):
        if path.parent == root and path.name == "__init__.py":
            continue
        source = _node(root, path)
        for stmt in ast.walk(ast.parse(path.read_text())):
            for target in _targets(root, path, stmt):
                if not target.startswith(PREFIX):
                    continue
                node = target.removeprefix(PREFIX).split(".")[0]
                if node != source and ((root / node).is_dir() or (root / f"{node}.py").is_file()):
                    where = f"{path.relative_to(root.parent.parent)}:{stmt.lineno}"
                    graph.setdefault(source, {}).setdefault(node, set()).add(where)
    return graph


def find_cycle(graph: dict[str, dict[str, set[str]]]) -> list[str] | None:
    try:
        tuple(TopologicalSorter({n: set(t) for n, t in graph.items()}).static_order())
    except CycleError as err:
        return list(err.args[1])
    return None


def test_no_two_parts_of_serve_import_each_other():
    graph = serve_graph()
    cycle = find_cycle(graph)
    if cycle is not None:
        hops = [f"  {a} -> {b}: {', '.join(sorted(graph[a][b]))}" for a, b in zip(cycle, cycle[1:], strict=False)]
        pytest.fail("serve/ imports in a loop, " + " -> ".join(cycle) + ":\n" + "\n".join(hops))


def test_the_graph_sees_lazy_type_only_and_relative_imports(tmp_path):
    root = tmp_path / "trtserve" / "serve"
    (root / "feature").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "feature" / "__init__.py").write_text("")
    (root / "core.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from trtserve.serve.feature.hook import Hook\n"
    )
    (root / "feature" / "hook.py").write_text("def f():\n    from .. import core\n")
    (root / "app.py").write_text("import trtserve.serve.core\nfrom trtserve.engine import errors\n")
    graph = serve_graph(root)
    assert {n: set(t) for n, t in graph.items()} == {"core": {"feature"}, "feature": {"core"}, "app": {"core"}}
    assert find_cycle(graph) is not None
    (root / "feature" / "hook.py").write_text("")
    assert find_cycle(serve_graph(root)) is None
