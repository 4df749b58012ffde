"""Run-time engine options: one table, one typed value carried end to end.

An option is a field of `EngineOptions` plus one `OptionSpec` in `OPTIONS`: which backends implement
it, whether a receipt records it (a replay must run with the same setting), and the check that
refuses it where the machine or the engine cannot honour it. The next options (speculation,
KV tiers) are one field and one spec each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict

from trtserve.engine.adapters import LoraConfig
from trtserve.engine.backends import resolve
from trtserve.engine.errors import UserError
from trtserve.engine.kv_offload import KVOffloadConfig
from trtserve.engine.speculative import SpeculativeConfig

# the kv_cache_dtype option's values (auto: the engine's own cache dtype)
KVCacheDType = Literal["auto", "float16", "bfloat16"]
KV_CACHE_DTYPES: tuple[str, ...] = get_args(KVCacheDType)


class EngineOptions(BaseModel):
    """The options' values. `RuntimeConfig` inherits these fields, so the run YAML stays flat."""

    model_config = ConfigDict(extra="forbid")

    deterministic: bool = False  # bitwise-identical results whatever the batch, chunking or cache state
    # W4A16 engines on CPUs with AVX-512 VNNI and VBMI (torch backend): decode rows' activations rounded
    # to int8 per weight group (as llama.cpp's q8_0), their dots in int8 instructions. Faster, and an
    # approximation of the float path (greedy outputs can differ; prefill keeps the float path).
    int8_activations: bool = False
    # LoRA adapters on the base model, one per request (GenerateRequest.adapter); null: none served
    lora: LoraConfig | None = None
    # speculative decoding (engine/speculative.py): proposals verified in one pass; null: off
    speculative: SpeculativeConfig | None = None
    # the prefix cache's second tier (engine/kv_offload.py): evicted full blocks spill there; null: none
    kv_offload: KVOffloadConfig | None = None
    # the KV cache's dtype: auto is the engine's (its dtype, or the 8-bit format it was built with); float16 or
    # bfloat16 under a float32 engine halve the cache's bytes and its reads, keys and values rounded to 16 bits
    kv_cache_dtype: KVCacheDType = "auto"

    def enabled(self) -> dict[str, Any]:
        """The options set away from their defaults, by name."""
        return {name: value for name, value in self if value != type(self).model_fields[name].default}

    def identity(self) -> dict[str, Any]:
        """What a receipt records: the enabled options that change the numbers."""
        return {name: value for name, value in self.enabled().items() if OPTIONS[name].in_identity}


@dataclass(frozen=True)
class OptionSpec:
    name: str  # the EngineOptions field
    summary: str
    backends: frozenset[str]  # backends (engine/backends.py names) that implement it when enabled
    in_identity: bool  # part of a receipt's engine identity: a replay must run with the same value
    # "module:function(model, value)" the backend's model runs once its weights are in place (before
    # anything is packed for its fast paths): raises UserError when this engine, dtype or CPU cannot
    # honour the value. Imported only when the option is on.
    requires: str | None = None


OPTIONS: dict[str, OptionSpec] = {
    s.name: s
    for s in (
        OptionSpec(
            "deterministic",
            "batch-invariant kernels: a token's logprobs do not depend on its batch, chunk or cache hits",
            frozenset({"torch"}),
            in_identity=True,
        ),
        OptionSpec(
            "int8_activations",
            "W4A16 decode rows rounded to int8 per weight group, dots by AVX-512 VNNI (an approximation)",
            frozenset({"torch"}),
            in_identity=True,
            requires="trtserve.models.decoder:check_int8_activations",
        ),
        # Not in the identity: a request's adapter is, by its content hash (GenerateRequest.adapter).
        OptionSpec(
            "lora",
            "LoRA adapters (PEFT's format) served on the base model, one per request, mixed in a step",
            frozenset({"torch", "tensorrt", "trtllm"}),  # TensorRT-LLM: LoraConfig + LoRARequest
            in_identity=False,
        ),
        # Not in the identity: lossless, so a replay gives the same tokens with or without it.
        OptionSpec(
            "speculative",
            "speculative decoding: n-gram prompt lookup or a draft model proposes, one pass verifies",
            frozenset({"torch", "trtllm"}),  # TensorRT-LLM: speculative_config, PyTorch backend only
            in_identity=False,
        ),
        OptionSpec(
            "kv_cache_dtype",
            "a float32 engine's KV cache in float16 or bfloat16: twice the tokens per byte, keys and values rounded",
            frozenset({"torch"}),  # TensorRT-LLM's KV dtype follows its engine (or its 8-bit kv_cache_quant_algo)
            in_identity=True,
            requires="trtserve.models.decoder:check_kv_cache_dtype",
        ),
        # Not in the identity: a restored block is bit-identical to a recompute.
        OptionSpec(
            "kv_offload",
            "a second KV tier: evicted prefix blocks spill to host memory or a file and come back by copy",
            frozenset({"torch", "tensorrt", "trtllm"}),  # TensorRT-LLM: kv_cache_config.host_cache_size
            in_identity=False,
        ),
    )
}
assert set(OPTIONS) == set(EngineOptions.model_fields), "every engine option needs exactly one OptionSpec"


def check_backend(options: EngineOptions, backend: str) -> None:
    """Refuse options this backend does not implement, naming the option and who does."""
    for name in options.enabled():
        spec = OPTIONS[name]
        if backend not in spec.backends:
            raise UserError(
                f"engine option {name} ({spec.summary}) is not available on the {backend} backend "
                f"(only {', '.join(sorted(spec.backends))}); remove `{name}` from the run config's engine section"
            )


def check_requirements(options: EngineOptions, model) -> None:
    """Run each enabled option's requirement check against the loaded model."""
    for name, value in options.enabled().items():
        if OPTIONS[name].requires:
            resolve(OPTIONS[name].requires)(model, value)
