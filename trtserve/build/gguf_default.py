"""What a build without --quant does with a GGUF file: keep its quantization (`--quant gguf`,
build/gguf_linears.py) where the build can, dequantize it where it cannot (and say why), and
the activation dtype `--dtype auto` gives such a build.

    --quant unset, a GGUF with quantized tensors   gguf, unless the backend, tp size, family, task
                                                   or a tensor type rules it out: then dequantized
    --quant unset, anything else                   unquantized (a float GGUF has nothing to keep)
    --quant none                                   unquantized: a GGUF is dequantized
    --quant FORMAT                                 FORMAT (gguf keeps or refuses in one sentence)
"""

from __future__ import annotations

from trtserve.build.config import KEEP_GGUF, NO_QUANT, BuildConfig
from trtserve.build.gguf_blocks import DENSE_TYPES, GROUP, INT4_TYPES, KEPT_TYPES
from trtserve.build.gguf_reader import GGUFReader
from trtserve.build.reader import CheckpointReader


def resolve_quant(cfg: BuildConfig, reader: CheckpointReader) -> tuple[BuildConfig, str | None]:
    """`cfg` with `quant` resolved (a format name, or None: unquantized), and why a quantized GGUF
    is dequantized when --quant was left unset (None where it is kept or nothing asked)."""
    if cfg.quant == NO_QUANT:
        return cfg.model_copy(update={"quant": None}), None
    if cfg.quant is not None or not isinstance(reader, GGUFReader) or not quantized_types(reader):
        return cfg, None
    why = _why_not_kept(cfg, reader)
    if why is not None:
        return cfg, why
    return cfg.model_copy(update={"quant": KEEP_GGUF}), None


def quantized_types(reader: GGUFReader) -> list[str]:
    """The file's quantized tensor types (what a dequantizing build expands), sorted."""
    dense = {t.name for t in DENSE_TYPES}
    return sorted({kind for kind, _ in reader.tensor_bytes().values() if kind not in dense})


def _why_not_kept(cfg: BuildConfig, reader: GGUFReader) -> str | None:
    """Why the engine cannot keep this GGUF's quantization (the clause of the build's note), or None."""
    family = reader.family
    unkept = sorted({kind for kind, _ in reader.tensor_bytes().values()} - {t.name for t in KEPT_TYPES})
    if unkept:
        return f"the engine has no packed format for {', '.join(unkept)}"
    if cfg.backend != "torch":
        return f"a GGUF's own quantization runs on the torch backend only, not {cfg.backend}"
    if cfg.tp_size != 1:
        return f"a GGUF's own quantization builds tp-size 1 only, not {cfg.tp_size}"
    if family.quant_formats is not None and KEEP_GGUF not in family.quant_formats:
        return f"{family.name} models do not keep a GGUF's quantization yet"
    if cfg.kv_cache_quant is not None:
        return f"--kv-cache-quant {cfg.kv_cache_quant} calibrates with ModelOpt, which a kept GGUF does not run"
    if cfg.pooling is not None:
        return "pooling models are built unquantized"
    return None


def kept_dtype(reader: CheckpointReader) -> str:
    """--dtype auto for a kept GGUF: float32 where every quantized layer linear maps exactly (Q4_0,
    Q4_1, Q4_K into int4, scales and zeros in float32), so the engine computes what the dequantized
    float32 engine does; bfloat16 where any is rounded to int8 (Q8_0, Q5_*, Q6_K), as every other
    --quant format, since exactness is gone and bfloat16 halves the scales and dense tensors."""
    if not isinstance(reader, GGUFReader):
        return "bfloat16"  # --quant gguf on another source: refused once the plan is made (gguf_linears.kept)
    return "float32" if _layer_types(reader) <= INT4_TYPES else "bfloat16"


def kept_linear_bits(reader: GGUFReader, item: int) -> float:
    """Bits per layer-linear weight of a kept GGUF built with `item`-byte scales (`trtserve check`'s
    memory bound): int4 and a scale and zero per 32 inputs where every linear is a 4-bit type, else
    at most int8 (a per-row scale aside)."""
    return 4.0 + 2 * 8 * item / GROUP if _layer_types(reader) <= INT4_TYPES else 8.0


def _layer_types(reader: GGUFReader) -> set:
    """The GGUF types of the layer linears, the float ones (kept dense) left out."""
    types = {reader.ggml_type(n) for n in reader.names() if ".layers." in n and len(reader.shape(n)) == 2}
    return types - DENSE_TYPES
