"""`trtserve inspect`: what an engine dir holds and what fits a memory budget."""

from __future__ import annotations

from pathlib import Path

from pydantic import ByteSize, TypeAdapter, ValidationError

from trtserve.build.strategies import STRATEGIES
from trtserve.engine.backends import backend_spec
from trtserve.engine.errors import UserError
from trtserve.engine.layout import read_engine_config
from trtserve.engine.manifest import verify_engine_dir


def parse_memory(text: str) -> int:
    try:
        return int(TypeAdapter(ByteSize).validate_python(text))
    except ValidationError:
        raise UserError(f"--memory {text!r} is not a size; write it like 8GiB, 512MiB or 2000000000") from None


def summarize(engine_dir: Path, memory: int | None = None) -> dict:
    manifest = verify_engine_dir(engine_dir)
    cfg = read_engine_config(engine_dir)
    m, b = cfg.pretrained_config, cfg.build_config
    is_weights = STRATEGIES[backend_spec(manifest.backend).name].is_weights
    weight_bytes = sum(e.size for rel, e in manifest.files.items() if is_weights(rel))
    kv_per_token = m.kv_bytes_per_token()
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
        "kv_bytes_per_token": kv_per_token,
    }
    if memory is not None:
        kv_budget = memory - weight_bytes
        if kv_budget <= 0:
            raise UserError(
                f"--memory {memory} bytes does not even hold the weights ({weight_bytes} bytes); give a larger budget"
            )
        blocks = kv_budget // (kv_per_token * bs)
        blocks_per_seq = -(-b.max_seq_len // bs)
        info |= {
            "memory_budget": memory,
            "kv_budget_bytes": kv_budget,
            "kv_blocks": blocks,
            "tokens_fit": blocks * bs,
            "full_length_sequences_fit": blocks // blocks_per_seq,
        }
    return info
