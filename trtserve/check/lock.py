"""The `lock` check: compare an engine.lock (written by `trtserve build --lock`, build/builder.py
`engine_lock`) with what a build of the config would use now.

Inputs and toolchain are compared at every level: the source's kind and fingerprint (not its path,
which differs from machine to machine), the resolved build config (less `model`, the resolved
path; the fingerprint stands for it), the backend, and every toolchain version. With `--level full`
the engine the `full` check built is compared file by file too. A TensorRT-LLM host (`target`:
GPU, SM, TensorRT) is not compared here: `trtserve run` refuses a mismatch when it loads the engine.
"""

from __future__ import annotations

import json
from pathlib import Path

from trtserve.build.builder import LOCK_VERSION, engine_lock, toolchain_versions
from trtserve.build.planner import BuildPlan
from trtserve.check.result import CheckFailed, Outcome
from trtserve.engine.errors import UserError
from trtserve.engine.manifest import read_manifest

_MACHINE_SPECIFIC = ("model",)  # build_config keys that name paths on the building machine
_SHOWN = 20  # diff lines in the detail before "... and N more"


def read_lock(path: Path) -> dict:
    """A lock file's contents; UserError naming the file when it cannot be used."""
    build = f"write one with `trtserve build --config CONFIG.yaml -o ENGINE_DIR --lock {path}`"
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"lock file {path} does not exist; {build}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"lock file {path} cannot be read ({type(err).__name__}); {build}") from None
    if not isinstance(data, dict) or data.get("lock_version") != LOCK_VERSION:
        got = data.get("lock_version") if isinstance(data, dict) else None
        raise UserError(f"lock file {path} has format {got!r}, this trtserve reads {LOCK_VERSION}; {build}")
    return data


def check_lock(path: Path, plan: BuildPlan, built: Path | None) -> Outcome:
    """Drift between the lock and now, as a readable diff. built: the engine dir the `full` check
    built (its files are compared), or None to compare inputs and toolchain only."""
    locked = read_lock(path)
    now = {
        "backend": plan.backend,
        "source": _source(plan.source()),
        "toolchain": toolchain_versions(),
        "build_config": _portable(plan.config.model_dump(mode="json")),
    }
    was = {
        "backend": locked.get("backend"),
        "source": _source(locked.get("source") or {}),
        "toolchain": locked.get("toolchain") or {},
        "build_config": _portable(locked.get("build_config") or {}),
    }
    lines = diff(was, now)
    if built is not None:
        lines += diff({"files": locked.get("files") or {}}, {"files": engine_lock(read_manifest(built))["files"]})
    scope = "inputs, toolchain and built files" if built is not None else "inputs and toolchain"
    if lines:
        shown = lines[:_SHOWN] + ([f"... and {len(lines) - _SHOWN} more"] if len(lines) > _SHOWN else [])
        head = "; ".join(lines[:3]) + ("; ..." if len(lines) > 3 else "")
        count = f"{len(lines)} difference" + ("s" if len(lines) > 1 else "")
        raise CheckFailed(f"{count} from {path}: {head}", "\n".join(shown))
    return Outcome(f"{scope} match {path}")


def diff(was: dict, now: dict, prefix: str = "") -> list[str]:
    """One line per differing leaf, dotted keys: `toolchain.torch: 2.13.0 (lock) -> 2.14.0 (now)`."""
    lines = []
    for key in sorted(set(was) | set(now), key=str):
        a, b, name = was.get(key, _ABSENT), now.get(key, _ABSENT), f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            lines += diff(a, b, name + ".")
        elif a != b:
            lines.append(f"{name}: {_show(a)} (lock) -> {_show(b)} (now)")
    return lines


_ABSENT = object()  # a key one side lacks


def _show(v) -> str:
    """A value for a diff line; digests shortened to 12 hex digits, which tell them apart."""
    if v is _ABSENT:
        return "absent"
    if isinstance(v, str):
        digest = v.removeprefix("sha256:")
        return v[: len(v) - len(digest) + 12] + "..." if len(digest) == 64 else v
    return json.dumps(v)


def _source(src: dict) -> dict:
    return {k: src.get(k) for k in ("kind", "fingerprint")}


def _portable(build_config: dict) -> dict:
    return {k: v for k, v in build_config.items() if k not in _MACHINE_SPECIFIC}
