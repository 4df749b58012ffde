"""What each TensorRT-LLM release line offers for the wave's front-end capabilities, and how trtserve serves
each on the TensorRT-LLM backends: one table, read by `trtserve doctor`, the docs and the checks.

Most of these run above the engine in trtserve for every backend (the reasoning and tool parsers, the
Anthropic front end, tracing spans and `return_metrics`), so the engine needs nothing from TensorRT-LLM
for them; the table says so, and records what upstream's own `trtllm-serve` has for anyone comparing.
What cannot work on a TensorRT-LLM engine (vision, pooling) is refused in one sentence naming the release.
Sources per row are named in `evidence`; "placed by date" rows were read at a PR's merge date, not at the tag.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtserve.backends.tensorrt_llm.capabilities import Capabilities


@dataclass(frozen=True)
class FeatureRow:
    key: str  # the capability's key (FEATURES, tests)
    name: str  # as doctor and the docs table name it
    upstream: dict[str, str]  # release line -> what TensorRT-LLM itself offers
    trtserve: str  # how trtserve serves it on --backend trtllm / tensorrt
    evidence: str  # where upstream's column was read
    refused: bool = False  # refused on the TensorRT-LLM backends (by the build: model_support, build/pooling.py)


def _same(text: str, main: str | None = None) -> dict[str, str]:
    return {"1.0": text, "1.1": text, "1.2": text, "main": main or text}


# trtllm-serve's parser names per release line: llmapi/reasoning_parser.py ReasoningParserFactory (PR #3354:
# deepseek-r1; qwen3 placed by date in 1.1) and serve/tool_parser/tool_parser_factory.py (PR #8216, merged
# 2025-10, after release/1.1 was cut; its later names placed by date)
UPSTREAM_REASONING: dict[str, tuple[str, ...]] = {
    "1.0": ("deepseek-r1",),
    "1.1": ("deepseek-r1", "qwen3"),
    "1.2": ("deepseek-r1", "qwen3"),
    "main": ("deepseek-r1", "qwen3", "qwen3_5", "minimax_m2", "deepseek_v4"),
}
_TOOLS_1_2 = ("qwen3", "qwen3_coder", "kimi_k2", "deepseekv3", "deepseekv3.1")
UPSTREAM_TOOLS: dict[str, tuple[str, ...]] = {
    "1.0": (),
    "1.1": (),
    "1.2": _TOOLS_1_2,
    "main": (*_TOOLS_1_2, "deepseek_v32"),
}


def _names(table: dict[str, tuple[str, ...]]) -> dict[str, str]:
    return {line: ", ".join(names) or "none" for line, names in table.items()}


FEATURES: dict[str, FeatureRow] = {
    f.key: f
    for f in (
        FeatureRow(
            "vision",
            "vision models (images through the LLM API)",
            _same(
                "Gemma3ForConditionalGeneration, LlavaNext, Qwen2-VL and others; not Llava, not Idefics3",
                "as 1.2, plus Gemma 4, Qwen3-VL and others; not Llava, not Idefics3",
            ),
            "refused at build: trtserve does not map its vision engine onto TensorRT-LLM's multimodal inputs yet; "
            "use --backend torch",
            "docs/source/models/supported-models.md (multimodal matrix); _torch/models registers no Llava / Idefics3",
            refused=True,
        ),
        FeatureRow(
            "pooling",
            "pooling (embeddings, rerank, classify)",
            _same(
                "no /v1/embeddings, rerank or classify route in trtllm-serve; classification models return logits "
                "through generate",
                "as 1.2 (Qwen3ForTextEmbedding registered in the LLM API; still no trtllm-serve route)",
            ),
            "refused at build (pooling models are built for the torch backend only)",
            "serve/openai_server.py register_routes (2026 main); supported-models.md",
            refused=True,
        ),
        FeatureRow(
            "reasoning_parser",
            "reasoning parser (trtllm-serve --reasoning_parser)",
            _names(UPSTREAM_REASONING),
            "parsed by trtserve above the engine for every backend (serve.reasoning_parser); the printed "
            "trtllm-serve line sets no parser",
            "llmapi/reasoning_parser.py ReasoningParserFactory (PR #3354: deepseek-r1)",
        ),
        FeatureRow(
            "tool_parser",
            "tool parser (trtllm-serve --tool_parser)",
            _names(UPSTREAM_TOOLS),
            "parsed by trtserve above the engine for every backend (serve.tool_call_parser); the printed "
            "trtllm-serve line sets no parser",
            "serve/tool_parser/tool_parser_factory.py; commands/serve.py --tool_parser (PR #8216)",
        ),
        FeatureRow(
            "anthropic",
            "Anthropic front end (/v1/messages)",
            _same("none: trtllm-serve has no /v1/messages"),
            "served by trtserve's own /v1/messages above the engine, for every backend",
            "serve/openai_server.py register_routes (2026 main: completions, chat, responses only)",
        ),
        FeatureRow(
            "tracing",
            "tracing (per-request timings, OTLP)",
            {
                "1.0": "SamplingParams.return_perf_metrics: request_perf_metrics timing_metrics (arrival, "
                "first scheduled, first token, last token); no OTLP",
                "1.1": "as 1.0, plus otlp_traces_endpoint (PR #5897, placed by date)",
                "1.2": "as 1.1",
                "main": "as 1.1, plus /perf_metrics in trtllm-serve",
            },
            "served from trtserve's own timings: its spans and return_metrics wrap the engine for every backend; "
            "trtserve sets no otlp_traces_endpoint (it exports its own spans)",
            "llmapi/llm.py (otlp_traces_endpoint, PR #5897); executor/result.py request_perf_metrics (1.0 notes)",
        ),
        FeatureRow(
            "moe",
            "MoE options",
            _same(
                "moe_expert_parallel_size, moe_tensor_parallel_size, moe_config.backend (default CUTLASS)",
                "as 1.2",
            ),
            "none set: TensorRT-LLM's defaults shard the experts by --tp-size (expert tensor parallelism)",
            "llmapi/llm_args.py TorchLlmArgs; Mapping (moe_tp_size = tp_size when neither is given)",
        ),
        FeatureRow(
            "mxfp4",
            "MXFP4 weights (gpt-oss)",
            {
                "1.0": "none (no gpt-oss)",
                "1.1": "gpt-oss MXFP4 MoE weights, Blackwell (PR #6645)",
                "1.2": "as 1.1, plus Hopper through moe_config.backend TRITON (PR #7451)",
                "main": "as 1.2",
            },
            "the hf/ checkpoint is served as is (model_support.py refuses gpt-oss before 1.1)",
            "1.1.0rc0 and 1.2.0rc0 release notes",
        ),
        FeatureRow(
            "wake_reuse",
            "prefix reuse after wake-up",
            {
                "1.0": "no sleep",
                "1.1": "enable_sleep (trtserve leaves it off)",
                "1.2": "enable_sleep (trtserve leaves it off)",
                "main": "KV contents are not restored on wakeup (RestoreMode NONE); the reuse tree keeps its blocks",
            },
            "each wake-up starts a new cache_salt for every later request, so no pre-sleep block is reused",
            "executor/base_worker.py sleep/wakeup, _torch/virtual_memory.py (2026 main)",
        ),
    )
}


# trtserve's parser names -> trtllm-serve's, where upstream has one (None: nothing to name; gpt-oss's
# harmony format is handled by trtllm-serve's harmony adapter whenever model_type is gpt_oss)
REASONING_NAMES = {"qwen3": "qwen3", "think": "qwen3", "smollm3": "qwen3", "deepseek_r1": "deepseek-r1"}
TOOL_NAMES = {"hermes": "qwen3", "qwen3_coder": "qwen3_coder", "deepseek_v3": "deepseekv3"}


def parser_flags(caps: Capabilities, reasoning: str | None = None, tool: str | None = None) -> list[str]:
    """trtllm-serve's --reasoning_parser / --tool_parser for trtserve's parser names on `caps`' release, for
    a user running upstream's server instead of trtserve; a name that release lacks is left out."""
    flags = []
    for flag, theirs, offered in (
        ("--reasoning_parser", REASONING_NAMES.get(reasoning or ""), UPSTREAM_REASONING[caps.line]),
        ("--tool_parser", TOOL_NAMES.get(tool or ""), UPSTREAM_TOOLS[caps.line]),
    ):
        if theirs in offered:
            flags += [flag, theirs]
    return flags


def rows(caps: Capabilities) -> list[tuple[str, str]]:
    """(capability, what this release offers and how trtserve serves it), for doctor."""
    return [(f.name, f"upstream: {f.upstream[caps.line]}; trtserve: {f.trtserve}") for f in FEATURES.values()]
