"""The command lines that run an engine dir under Dynamo, one a role: pure functions, nothing runs.

A `--backend trtllm` engine dir holds the HF checkpoint and the LLM-API options trtserve wrote for
`trtllm-serve` (llm_api_options.yaml); Dynamo's own TensorRT-LLM worker takes the same file as
`--extra-engine-args`. Disaggregated roles add TensorRT-LLM's KV cache transceiver (and the prefill
role turns the overlap scheduler off, as TensorRT-LLM's disaggregated serving requires); the transceiver's
backend is spelt as the planned release takes it ("default" on 1.0, "DEFAULT" after). A `--backend tensorrt`
engine dir has no hf/ for Dynamo's worker to load, so it is refused.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from trtserve.dynamo.settings import COMPONENTS, ROLES
from trtserve.engine.errors import UserError
from trtserve.engine.layout import HF_DIR, OPTIONS_FILE

TRTLLM_MODES = {"aggregated": "agg", "prefill": "prefill", "decode": "decode"}


def disagg_overrides(role: str, transceiver_backend: str = "DEFAULT") -> dict | None:
    """LLM-API options a disaggregated TensorRT-LLM worker needs on top of the engine dir's (None: none)."""
    if role not in ("prefill", "decode"):
        return None
    out: dict = {"cache_transceiver_config": {"backend": transceiver_backend}}
    return out | {"disable_overlap_scheduler": True} if role == "prefill" else out


def frontend_argv(port: int = 8000, router_mode: str = "kv") -> list[str]:
    argv = ["python", "-m", "dynamo.frontend", "--http-host", "127.0.0.1", "--http-port", str(port)]
    return argv + ["--router-mode", router_mode, "--discovery-backend", "file"]


def trtllm_worker_argv(
    engine_dir: Path, role: str, namespace: str, served_name: str, block_size: int, transceiver_backend: str = "DEFAULT"
) -> list[str]:
    """`python -m dynamo.trtllm` for one role of a `--backend trtllm` engine dir."""
    argv = ["python", "-m", "dynamo.trtllm", "--model", str(engine_dir / HF_DIR)]
    argv += ["--served-model-name", served_name, "--extra-engine-args", str(engine_dir / OPTIONS_FILE)]
    argv += ["--namespace", namespace, "--endpoint", f"dyn://{namespace}.{COMPONENTS[role]}.generate"]
    argv += ["--disaggregation-mode", TRTLLM_MODES[role], "--kv-block-size", str(block_size), "--publish-kv-events"]
    overrides = disagg_overrides(role, transceiver_backend)
    if overrides is not None:
        argv += ["--override-engine-args", json.dumps(overrides, separators=(",", ":"))]
    return argv


def trtserve_worker_argv(engine_dir: Path, role: str, namespace: str) -> list[str]:
    return ["trtserve", "dynamo", str(engine_dir), "--role", role, "--namespace", namespace]


def dry_run_lines(
    engine_dir: Path,
    backend: str,
    namespace: str,
    served_name: str,
    block_size: int,
    transceiver_backend: str = "DEFAULT",
) -> list[str]:
    """The frontend and one worker line a role: Dynamo's TensorRT-LLM worker for `--backend trtllm` engine dirs,
    trtserve's own worker for torch engine dirs. transceiver_backend: cache_transceiver_config.backend as the
    TensorRT-LLM that will run it spells its default (capabilities.Capabilities.transceiver_default)."""
    if backend == "tensorrt":
        raise UserError(
            f"{engine_dir} holds TensorRT engines, which Dynamo's TensorRT-LLM worker (python -m dynamo.trtllm) "
            "does not load from an engine dir (it takes a Hugging Face checkpoint); rebuild it with --backend "
            "trtllm to run it under Dynamo, or serve it with `trtserve run`"
        )
    lines = ["# frontend (KV-aware routing; DYN_FILE_KV names the shared discovery directory)"]
    lines.append(shlex.join(frontend_argv()))
    for role in ROLES:
        lines.append(f"# {role} worker")
        if backend == "trtllm":
            argv = trtllm_worker_argv(engine_dir, role, namespace, served_name, block_size, transceiver_backend)
            lines.append(shlex.join(argv))
        else:
            lines.append(shlex.join(trtserve_worker_argv(engine_dir, role, namespace)))
    return lines
