"""Which TensorRT-LLM release serves which model architecture: one table, read by every check.

A row is keyed by the Hugging Face `architectures` value (for trtserve's text families that is also the
family's `trtllm_architecture`). For `--backend trtllm` the engine dir's `hf/` checkpoint is served as
is by TensorRT-LLM's PyTorch backend, so a model works on exactly the release lines whose
`tensorrt_llm/_torch/models/modeling_*.py` registers its architecture (`@register_auto_model`). For
`--backend tensorrt` trtserve writes the unified checkpoint itself, so the row must also say trtserve's
converter writes that architecture, on a release that still has `trtllm-build`.

Release lines are placed by what each line's source has; where a row says "placed by date" the
PR's merge date was read, not the tag's file. Architectures without a row are refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trtserve.backends.tensorrt_llm.capabilities import RELEASES, Capabilities
from trtserve.engine.errors import EngineIntegrityError, UserError
from trtserve.engine.layout import ENGINE_CONFIG, HF_DIR, read_engine_config

ALL = frozenset(RELEASES)  # "1.0", "1.1", "1.2", "main"
FROM_1_1 = frozenset({"1.1", "1.2", "main"})
AUTODEPLOY_ONLY = (
    "TensorRT-LLM serves it only through its AutoDeploy backend (docs/source/models/supported-models.md, "
    "footnote 5), which trtserve does not drive"
)
NOT_REGISTERED = "no release's _torch/models registers it"


@dataclass(frozen=True)
class ModelRow:
    """What TensorRT-LLM's release lines do with one architecture."""

    architecture: str  # the checkpoint's HF `architectures` value
    pytorch: frozenset[str]  # release lines whose PyTorch backend registers it (`--backend trtllm`)
    evidence: str  # where that was read, one line
    tensorrt: bool = False  # trtserve writes its unified checkpoint for trtllm-build (`--backend tensorrt`)
    moe: bool = False  # an MoE model: moe_expert_parallel_size / moe_tensor_parallel_size / moe_config apply
    mxfp4: frozenset[str] = frozenset()  # release lines that load its MXFP4 expert weights
    vision: bool = False  # multimodal through the LLM API: refused until trtserve maps vision for TensorRT-LLM
    why_not: str = NOT_REGISTERED  # why the lines outside `pytorch` cannot serve it


MODELS: dict[str, ModelRow] = {
    r.architecture: r
    for r in (
        ModelRow("LlamaForCausalLM", ALL, "_torch/models/modeling_llama.py (0.17 on)", tensorrt=True),
        # trtserve writes Mistral's unified checkpoint as LlamaForCausalLM (models/mistral.py)
        ModelRow("MistralForCausalLM", ALL, "_torch/models/modeling_mistral.py, supported-models.md", tensorrt=True),
        ModelRow("Qwen2ForCausalLM", ALL, "_torch/models/modeling_qwen.py (0.17 on)", tensorrt=True),
        ModelRow("Qwen3ForCausalLM", ALL, "_torch/models/modeling_qwen3.py (0.20 release notes: Qwen3)"),
        ModelRow("Phi3ForCausalLM", ALL, "_torch/models/modeling_phi3.py (PR #5644, 2025-07, in 1.0)"),
        ModelRow(
            "SmolLM3ForCausalLM", frozenset(), "supported-models.md on main: AutoDeploy only", why_not=AUTODEPLOY_ONLY
        ),
        ModelRow(
            "GraniteForCausalLM", frozenset(), "supported-models.md on main: AutoDeploy only", why_not=AUTODEPLOY_ONLY
        ),
        # modeling_gemma2.py registers Gemma2ForCausalLM in the 2026 main source; absent from 1.0-1.2's
        # support matrix (placed by content, not read at the tags)
        ModelRow(
            "Gemma2ForCausalLM",
            frozenset({"main"}),
            "_torch/models/modeling_gemma2.py (2026 main)",
            why_not="only main's _torch/models registers it (modeling_gemma2.py)",
        ),
        ModelRow("Gemma3ForCausalLM", ALL, "_torch/models/modeling_gemma3.py (0.20 release notes: Gemma3-1b-it)"),
        ModelRow("MixtralForCausalLM", ALL, "_torch/models/modeling_mixtral.py (0.17 on)", moe=True),
        ModelRow("Qwen2MoeForCausalLM", ALL, "_torch/models/modeling_qwen_moe.py (0.18 on)", moe=True),
        ModelRow("Qwen3MoeForCausalLM", ALL, "_torch/models/modeling_qwen3_moe.py (0.20 on)", moe=True),
        ModelRow("OlmoeForCausalLM", frozenset(), "no @register_auto_model('OlmoeForCausalLM') in any line", moe=True),
        # PR #6645 (1.1.0rc0 release notes, 2025-08): gpt-oss with MXFP4 MoE weights (Blackwell); PR #7451
        # (1.2.0rc0) adds MXFP4 on Hopper through moe_config.backend TRITON
        ModelRow(
            "GptOssForCausalLM",
            FROM_1_1,
            "_torch/models/modeling_gpt_oss.py (PR #6645, 1.1.0rc0)",
            moe=True,
            mxfp4=FROM_1_1,
            why_not="it arrived in 1.1 (PR #6645, after 1.0 was cut)",
        ),
        ModelRow(
            "Gemma3ForConditionalGeneration",
            ALL,
            "_torch/models/modeling_gemma3vl.py (0.21 release notes: Gemma3 VLM)",
            vision=True,
        ),
        ModelRow("LlavaForConditionalGeneration", frozenset(), "only LlavaNext is registered", vision=True),
        ModelRow("Idefics3ForConditionalGeneration", frozenset(), "no Idefics3 model in _torch/models", vision=True),
    )
}

# the MoE options of TorchLlmArgs (llmapi/llm_args.py, 1.0 on): trtserve sets none, so TensorRT-LLM shards
# experts by tensor parallelism (moe_tensor_parallel_size = tp, moe_expert_parallel_size = 1) with
# moe_config.backend CUTLASS, its defaults
MOE_OPTIONS = ("moe_expert_parallel_size", "moe_tensor_parallel_size", "moe_config.backend")


def row_for(architectures: list[str] | tuple[str, ...]) -> ModelRow | None:
    """The table's row for the first of a checkpoint's architectures it has (None: none)."""
    return next((MODELS[a] for a in architectures if a in MODELS), None)


def model_problem(
    caps: Capabilities,
    backend: str,
    hf_architectures: list[str] | tuple[str, ...],
    trtllm_architecture: str | None,
    quant_method: str | None = None,
) -> str | None:
    """Why `caps`' release cannot serve a checkpoint on `backend` ("trtllm" | "tensorrt"), as one sentence
    naming the release; None if it can. The PyTorch backend reads the HF checkpoint (`hf_architectures`);
    trtllm-build reads trtserve's unified checkpoint (`trtllm_architecture`, the family's). quant_method:
    config.json's `quantization_config.quant_method` (gpt-oss ships "mxfp4")."""
    row = row_for(hf_architectures)
    if row is not None and row.vision:
        return (
            f"{row.architecture} is a vision model, which trtserve does not map onto TensorRT-LLM's multimodal "
            f"LLM API yet ({caps.label}); use --backend torch"
        )
    names = (trtllm_architecture,) if backend == "tensorrt" and trtllm_architecture else tuple(hf_architectures)
    row = row_for(names)
    if row is None:
        shown = ", ".join(names) or "no architecture"
        return f"trtserve maps no TensorRT-LLM model for {shown} ({caps.label}); use --backend torch"
    if backend == "tensorrt" and not row.tensorrt:
        return (
            f"trtserve writes no TensorRT-LLM checkpoint for {row.architecture}, so trtllm-build cannot build it "
            f"({caps.label}); use --backend trtllm or torch"
        )
    if caps.line not in row.pytorch:
        where = ", ".join(sorted(row.pytorch)) or "no release"
        return (
            f"TensorRT-LLM release line {caps.line} cannot serve {row.architecture}: {row.why_not} "
            f"(served by: {where}); use --backend torch"
        )
    if quant_method == "mxfp4" and caps.line not in row.mxfp4:
        return (
            f"TensorRT-LLM release line {caps.line} loads no MXFP4 weights for {row.architecture}; use --backend torch"
        )
    return None


def check_model(
    caps: Capabilities,
    backend: str,
    hf_architectures: list[str] | tuple[str, ...],
    trtllm_architecture: str | None,
    quant_method: str | None = None,
) -> None:
    """UserError with model_problem's sentence when the release cannot serve the checkpoint."""
    problem = model_problem(caps, backend, hf_architectures, trtllm_architecture, quant_method)
    if problem is not None:
        raise UserError(problem)


def hf_model_of(hf_config: dict) -> tuple[list[str], str | None]:
    """(architectures, quantization_config.quant_method) of a Hugging Face config.json's contents."""
    quant = hf_config.get("quantization_config") or {}
    return list(hf_config.get("architectures") or []), quant.get("quant_method") if isinstance(quant, dict) else None


def engine_dir_problem(caps: Capabilities, backend: str, engine_dir: Path) -> str | None:
    """model_problem for a built engine dir on the installed release: its hf/config.json (the PyTorch
    backend's checkpoint) and config.json's pretrained_config (the family's TensorRT-LLM architecture)."""
    try:
        arch = read_engine_config(engine_dir).pretrained_config.architecture
    except EngineIntegrityError:
        return None  # not a readable engine dir: opening it says so
    hf_file = engine_dir / HF_DIR / ENGINE_CONFIG
    hf, quant = hf_model_of(json.loads(hf_file.read_text())) if hf_file.is_file() else ([], None)
    return model_problem(caps, backend, hf or [arch], arch, quant)


def cell(row: ModelRow, line: str, backend: str) -> str:
    """One cell of the docs table: what `line` does with `row` on `backend`."""
    if backend == "tensorrt" and not RELEASES[line].tensorrt_backend:
        return "no TensorRT backend"
    if row.vision:
        upstream = " (upstream serves it)" if line in row.pytorch and backend == "trtllm" else ""
        return "refused: vision not mapped" + upstream
    if backend == "tensorrt":
        return "yes" if row.tensorrt and line in row.pytorch else "refused: no trtserve checkpoint"
    if line not in row.pytorch:
        return "refused"
    extra = [*(["MoE: tp-sharded experts"] if row.moe else []), *(["MXFP4"] if line in row.mxfp4 else [])]
    return "yes" + (f" ({', '.join(extra)})" if extra else "")
