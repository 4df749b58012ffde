"""`trtserve inspect`: what an engine dir holds and what fits a memory budget."""

from __future__ import annotations

from pathlib import Path

import psutil
from pydantic import ByteSize, TypeAdapter, ValidationError

from trtserve.build import tensor
from trtserve.build.strategies import STRATEGIES
from trtserve.engine.backends import backend_spec
from trtserve.engine.errors import UserError
from trtserve.engine.kv_sizing import check_kv_cache_dtype, size_kv_cache
from trtserve.engine.layout import EngineBuildConfig, read_engine_config
from trtserve.engine.manifest import verify_engine_dir
from trtserve.engine.model_config import ModelConfig
from trtserve.engine.run_config import RuntimeConfig
from trtserve.tensor.config import CONFIG_FILE


def parse_memory(text: str, flag: str = "--memory") -> int:
    try:
        return int(TypeAdapter(ByteSize).validate_python(text))
    except ValidationError:
        raise UserError(f"{flag} {text!r} is not a size; write it like 8GiB, 512MiB or 2000000000") from None


def kv_capacity(m: ModelConfig, b: EngineBuildConfig, kv_budget: int, kv_dtype: str = "auto") -> dict:
    """What `trtserve run --kv-cache-memory kv_budget` allocates: the same rule, the same blocks."""
    run = RuntimeConfig(kv_cache_memory=kv_budget, kv_cache_dtype=kv_dtype)
    size = size_kv_cache(m, b, run, device="cpu", available=0, max_batch_size=1)
    flag = f"--kv-cache-memory {kv_budget}" + (f" --kv-cache-dtype {kv_dtype}" if kv_dtype != "auto" else "")
    return {
        "kv_budget_bytes": kv_budget,
        "kv_blocks": size.num_blocks,
        "tokens_fit": size.num_tokens,
        "full_length_sequences_fit": size.full_length_sequences,
        "run_flag": flag,
    }


def cpu_default(m: ModelConfig, b: EngineBuildConfig, kv_dtype: str = "auto") -> dict:
    """What `trtserve run` takes on this host's CPU without a budget (engine/kv_sizing.py)."""
    available = psutil.virtual_memory().available
    run = RuntimeConfig(kv_cache_dtype=kv_dtype)
    size = size_kv_cache(m, b, run, device="cpu", available=available, max_batch_size=b.max_batch_size)
    return {"kv_blocks": size.num_blocks, "bytes": size.num_bytes, "tokens": size.num_tokens, "why": size.reason}


def source_weight_bytes(source: dict, weight_bytes: int) -> dict:
    """A GGUF-built engine's weight bytes next to the GGUF's tensor bytes (where the file is still there)."""
    path = Path(source.get("path", ""))
    if source.get("kind") != "GGUFReader" or not path.is_file():
        return {}
    from trtserve.build.gguf_file import GGUFFile, GGUFFormatError

    try:
        gguf_bytes = sum(t.nbytes for t in GGUFFile(path).tensors.values())
    except (GGUFFormatError, OSError):
        return {}
    return {"gguf_weight_bytes": gguf_bytes, "weight_bytes_per_gguf_byte": round(weight_bytes / max(gguf_bytes, 1), 3)}


def kv_by_layer_kind(m: ModelConfig, max_seq_len: int, kv_dtype: str = "auto") -> dict:
    """Each kind of layer (global, or windowed: "window_W"), with its layer count: the KV bytes one token
    costs those layers, and what a max_seq_len sequence costs them (every layer keeps every block; a
    windowed one needs only its window's: docs/building.md)."""
    per_layer = m.kv_bytes_per_token(kv_dtype) // m.num_hidden_layers
    kinds = {f"{'global' if w is None else f'window_{w}'} x{n}": n * per_layer for w, n in m.kv_layer_kinds().items()}
    return {
        "kv_bytes_per_token_by_layer_kind": kinds,
        "kv_bytes_full_length_by_layer_kind": {k: v * max_seq_len for k, v in kinds.items()},
    }


def summarize(
    engine_dir: Path, memory: int | None = None, kv_cache_memory: int | None = None, kv_cache_dtype: str = "auto"
) -> dict:
    """kv_cache_dtype: as `trtserve run --kv-cache-dtype` (float16 / bfloat16 under a float32 engine)."""
    manifest = verify_engine_dir(engine_dir)
    if (engine_dir / CONFIG_FILE).is_file():  # a tensor model's engine dir: no KV cache, no LLM shape
        return tensor.summarize(engine_dir, manifest)
    cfg = read_engine_config(engine_dir)
    m, b = cfg.pretrained_config, cfg.build_config
    is_weights = STRATEGIES[backend_spec(manifest.backend).name].is_weights
    weight_bytes = sum(e.size for rel, e in manifest.files.items() if is_weights(rel))
    check_kv_cache_dtype(m, kv_cache_dtype)
    kv_per_token = m.kv_bytes_per_token(kv_cache_dtype)
    bs = b.plugin_config.tokens_per_block
    info = {
        "engine_dir": str(engine_dir),
        "backend": manifest.backend,
        "created_at": manifest.created_at,
        "source": manifest.source,
        "toolchain": manifest.toolchain,
        "architecture": m.architecture,
        "dtype": m.dtype,
        "quant_algo": m.quantization.quant_algo,  # None: unquantized
        "kv_cache_quant_algo": m.quantization.kv_cache_quant_algo,
        "layers": m.num_hidden_layers,
        "hidden_size": m.hidden_size,
        "heads": m.num_attention_heads,
        "kv_heads": m.num_key_value_heads,
        "head_size": m.head_size,
        "intermediate_size": m.intermediate_size,
        "vocab_size": m.vocab_size,
        "tp_size": m.mapping.tp_size,
        "max_seq_len": b.max_seq_len,
        "max_batch_size": b.max_batch_size,
        "max_num_tokens": b.max_num_tokens,
        "tokens_per_block": bs,
        "weight_bytes": weight_bytes,  # resident: quantized weights stay quantized in memory
        **source_weight_bytes(manifest.source, weight_bytes),
        "kv_bytes_per_token": kv_per_token,
        **({"kv_cache_dtype": kv_cache_dtype} if kv_cache_dtype != "auto" else {}),
    } | kv_by_layer_kind(m, b.max_seq_len, kv_cache_dtype)
    if m.moe is not None:
        from trtserve.models.moe import parameters
        from trtserve.models.registry import family_for_trtllm

        total, active = parameters(family_for_trtllm(m.architecture).layout, m)
        info |= {"experts": m.moe.num_experts, "experts_per_token": m.moe.top_k}
        info |= {"parameters": total, "active_parameters": active}  # a token reads the active ones
    if manifest.vision is not None:  # the tower and projector, and what one image costs in the prompt
        v = manifest.vision
        info |= {"vision": v.family, "vision_tower": v.tower.kind, "vision_parameters": v.vision_parameters}
        info |= {"image_size": v.tower.image_size, "tokens_per_image": v.tokens_per_image}
        if v.tiles is not None:  # tokens_per_image is a tile's: an image takes up to this many tiles
            info["image_tiles_max"] = v.tiles.max_side**2 + 1
    if manifest.backend == "torch":
        info["kv_cache_default_cpu"] = cpu_default(m, b, kv_cache_dtype)
    if memory is not None and kv_cache_memory is not None:
        raise UserError("give --memory (weights and KV cache) or --kv-cache-memory (KV cache only), not both")
    if memory is not None:
        if memory <= weight_bytes:
            raise UserError(
                f"--memory {memory} bytes does not even hold the weights ({weight_bytes} bytes); give a larger budget"
            )
        info |= {"memory_budget": memory} | kv_capacity(m, b, memory - weight_bytes, kv_cache_dtype)
    elif kv_cache_memory is not None:
        info |= kv_capacity(m, b, kv_cache_memory, kv_cache_dtype)
    return info
