"""serve/ knows an engine only by the contract (engine/protocol.py: its info, capabilities, heartbeat):
no probing of engines with getattr / hasattr, no attributes the protocol does not declare, no backend
or platform names. Checked on the source with ast."""

from __future__ import annotations

import ast
from pathlib import Path

from trtserve.engine.backends import BACKENDS
from trtserve.engine.protocol import Engine

SERVE = Path(__file__).resolve().parents[2] / "trtserve" / "serve"
# What serve may read of an engine: the protocol's methods and attributes.
MEMBERS = frozenset(n for n in dir(Engine) if not n.startswith("_")) | frozenset(Engine.__annotations__)
# Backend and platform names (engine/backends.py) and the packages behind them.
NAMES = frozenset(BACKENDS) | {b.platform for b in BACKENDS.values()} | {"torch", "tensorrt", "tensorrt_llm"}
PROBES = ("getattr", "hasattr", "setattr", "delattr")
# `.engine` of these is not an Engine: the run config's engine section, a receipt's or a replay's
# EngineIdentity (the names serve gives them).
NOT_ENGINES = frozenset({"config", "cfg", "receipt", "rec", "r", "result", "report"})


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def _is_engine(node: ast.expr) -> bool:
    """`engine`, or `<x>.engine` where x is not one of NOT_ENGINES."""
    if isinstance(node, ast.Name):
        return node.id == "engine"
    return isinstance(node, ast.Attribute) and node.attr == "engine" and _name(node.value) not in NOT_ENGINES


def violations(source: str) -> list[str]:
    """Each use of an engine outside its contract in `source`, as "line: what"."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Call) and _name(node.func) in PROBES and node.args and _is_engine(node.args[0]):
            found.append(f"{line}: {_name(node.func)}() on {ast.unparse(node.args[0])}")
        elif isinstance(node, ast.Attribute) and _is_engine(node.value) and node.attr not in MEMBERS:
            found.append(f"{line}: {ast.unparse(node)} is not in the Engine protocol")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES:
            found.append(f"{line}: backend name {node.value!r}")
    return found


def test_serve_uses_engines_only_through_the_contract():
    wrong = [
        f"{path.relative_to(SERVE.parent.parent)}:{v}"
        for path in sorted(SERVE.rglob("*.py"))
        for v in violations(path.read_text())
    ]
    assert not wrong, "serve/ reaching past the Engine protocol (use engine.info / heartbeat()):\n" + "\n".join(wrong)


def test_the_check_sees_each_kind_of_reach_and_nothing_else():
    bad = """
beat = getattr(engine, "last_beat", None)
if hasattr(svc.engine, "invalidate_cache"): pass
platform = mv.engine.platform
if engine.info.backend == "torch": pass
fast = backend in ("tensorrt_llm", "trtllm")
"""
    assert [v.split(":")[0] for v in violations(bad)] == ["2", "3", "4", "5", "6", "6"]
    good = """
beat = engine.heartbeat()
if svc.engine.info.capabilities.priorities: engine.abort(rid)
limit = config.engine.max_batch_size
same = receipt.engine.fingerprint == result.engine.fingerprint
v = getattr(svc, "version", None)
text = "the torch backend"
"""
    assert violations(good) == []
