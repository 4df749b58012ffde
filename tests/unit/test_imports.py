"""The import rules of the README's Layout section, checked on the source: who may import whom,
no package loops, and the contract, text and serve packages import without torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "trtserve"
# package -> the packages of ours it may import (itself always). "trtserve" is the root __init__.
ALLOWED = {
    "engine": set(),
    "kernels": set(),
    "text": {"engine"},
    "vision": {"engine"},  # images in without torch (Pillow, numpy): decode, limits, pixels, placeholders
    "models": {"engine", "kernels"},
    "runtime": {"engine", "models", "kernels"},
    "backends": {"engine", "runtime", "models"},
    "quant": {"engine", "models"},  # build-time math and checkpoint I/O; `build` drives it
    "build": {"engine", "models", "quant", "backends", "tensor"},
    "tensor": {"engine"},  # tensor models (ONNX Runtime, Python steps, ensembles): no torch, no serve
    "serve": {"engine", "text", "state", "tensor", "vision"},
    "state": {"engine"},  # the durable state store (SQLite): serve/batch, serve/idempotency, receipts
    "bench": {"engine"},
    "llm": {"engine", "text", "runtime"},
    "check": {"engine", "models", "build", "quant", "runtime", "llm"},  # `trtserve check`: above the build
    "deploy": {"engine", "serve"},  # Ray Serve replicas around serve/'s app (trtserve[ray]); no torch of its own
    "dynamo": {"engine"},  # `trtserve dynamo`: a Dynamo worker over open_engine's Engine (trtserve[dynamo])
    "cli": None,  # anything
}
# The root package (trtserve/__init__.py: __version__, and LLM / SamplingParams as lazy attributes)
# may be imported by anyone; it imports nothing of ours at module level (checked below).
TORCH_FREE = ("engine", "text", "serve", "state", "tensor", "vision")


def _package(path: Path) -> str:
    rel = path.relative_to(ROOT)
    if len(rel.parts) == 1:
        return "trtserve" if rel.name == "__init__.py" else rel.stem
    return rel.parts[0]


def _imports(path: Path) -> set[str]:
    """Every trtserve module this file imports, at any depth (lazy imports count)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "trtserve"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "trtserve":
            found.add(node.module)
    return found


def _target(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "trtserve"


def _edges() -> dict[str, dict[str, set[str]]]:
    """package -> imported package -> the files that import it."""
    edges: dict[str, dict[str, set[str]]] = {}
    for path in ROOT.rglob("*.py"):
        pkg = _package(path)
        for module in _imports(path):
            target = _target(module)
            if target not in (pkg, "trtserve") and pkg != "trtserve":
                edges.setdefault(pkg, {}).setdefault(target, set()).add(str(path.relative_to(ROOT.parent)))
    return edges


def test_every_package_imports_only_what_it_may():
    wrong = []
    for pkg, targets in _edges().items():
        allowed = ALLOWED.get(pkg, set())
        if allowed is None:
            continue
        for target, files in targets.items():
            if target not in allowed:
                wrong.append(f"{pkg} -> {target} ({', '.join(sorted(files))})")
    assert not wrong, "imports against the layout rules:\n" + "\n".join(sorted(wrong))


def test_no_two_packages_import_each_other():
    graph = {pkg: set(targets) for pkg, targets in _edges().items()}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as err:
        pytest.fail(f"packages import each other in a loop: {err.args[1]}")


def test_contract_text_and_serve_import_without_torch():
    modules = sorted(
        ".".join(p.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
        for pkg in TORCH_FREE
        for p in (ROOT / pkg).rglob("*.py")
    )
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'tensorrt_llm', 'safetensors'))\n"
        "ours = sorted(m for m in sys.modules if m.startswith('trtserve.') and m.split('.')[1] not in "
        f"{TORCH_FREE!r})\n"
        "print(heavy, ours)\n"
        "sys.exit(1 if heavy or ours else 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"importing {', '.join(TORCH_FREE)} pulled in (heavy, ours): {r.stdout}{r.stderr}"


def test_the_root_package_imports_lazily():
    tree = ast.parse((ROOT / "__init__.py").read_text())
    top = [n for n in tree.body if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("trtserve")]
    assert not top, "trtserve/__init__.py must import trtserve modules inside __getattr__ only"


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")


def _module_edges() -> dict[str, set[str]]:
    """trtserve module -> the trtserve modules it imports anywhere in its source (`from p import m`,
    m a module of p, is an edge to p.m)."""
    paths = {_module(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name in paths}
                continue
            base = node.module or ""
            if node.level:  # relative: from .x import y
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], *filter(None, [base])]
                )
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in paths:
                    targets.add(sub)
                elif base in paths:
                    targets.add(base)
        targets.discard(name)
    return graph


def test_no_import_cycle_between_modules():
    """No two trtserve modules import each other, directly or around a loop.

    Every import counts: at module level, inside functions and under `if TYPE_CHECKING:` alike. A
    lazy or type-only import hides a loop from Python, not from the design: it is a type in the
    wrong module (STYLE.md, "Who may import whom"), so it is moved, not deferred. Each loop found
    is listed."""
    graph, loops = _module_edges(), []
    while len(loops) < 20:
        try:
            tuple(TopologicalSorter(graph).static_order())
            break
        except CycleError as err:
            cycle = err.args[1]  # [a, b, ..., a]: b imports a
            loops.append(" -> ".join(reversed(cycle)))  # x -> y: x imports y
            graph[cycle[1]].discard(cycle[0])  # then the next loop, if any
    assert not loops, "modules import each other in a loop:\n" + "\n".join(loops)
