"""The `memory` check: does an engine of the plan fit its target, per device?

    weights      every tensor of the layout (models/layout.py) at the plan's dtype; the linears of a
                 quantized build at the bits of its ModelOpt recipe (the recipe the build runs),
                 plus one scale per block where the recipe has blocks
    activations  one engine step of max_num_tokens tokens: the residual stream, the normed input,
                 the attention output, q/k/v and the gated MLP's two branches, in the plan's dtype;
                 and float32 logits for max_batch_size sequences
    KV cache     max_batch_size sequences of max_seq_len tokens, each rounded up to whole blocks (as
                 `trtserve run` and `trtserve inspect` count them), in the KV-cache format's bytes

With tp_size N each device holds 1/N of every linear split by heads, rows or columns and of the
vocabulary-split lm_head, and max(KV heads / N, 1) KV heads (fewer KV heads than ranks are
duplicated). Embeddings and norms are replicated. These are estimates from shapes (no tensor is
read); they are what a build config decides, not allocator slack, which the target's usable share
covers (check/targets.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trtserve.build.config import KEEP_GGUF, BuildConfig
from trtserve.build.gguf_default import kept_linear_bits
from trtserve.build.planner import BuildPlan
from trtserve.check.result import CheckFailed, Outcome
from trtserve.check.targets import Target
from trtserve.engine.model_config import DTYPE_BYTES, ModelConfig, Quantization
from trtserve.models.features import CONFIG_FIELDS
from trtserve.models.layout import LM_HEAD, Layout

GiB = 2**30
_LOGIT_BYTES = 4  # float32 logits (ModelConfig.logits_dtype)


@dataclass(frozen=True)
class Estimate:
    """Bytes on one device."""

    weights: int
    activations: int  # independent of max_batch_size
    logits_per_sequence: int
    kv_per_sequence: int  # one max_seq_len sequence, block-rounded
    usable: int  # what the target gives the engine
    batch: int  # max_batch_size

    @property
    def total(self) -> int:
        return self.weights + self.activations + self.batch * (self.logits_per_sequence + self.kv_per_sequence)

    @property
    def most_sequences(self) -> int:
        """How many full-length sequences fit: the largest max_batch_size that fits (0: none)."""
        room = self.usable - self.weights - self.activations
        return max(room // (self.logits_per_sequence + self.kv_per_sequence), 0)


def check_memory(plan: BuildPlan, target: Target) -> Outcome:
    est = estimate(plan, target)
    tp = plan.config.tp_size
    where = f"{target.name}" + (f" per GPU (tp {tp})" if tp > 1 else "")
    limits = plan.limits
    parts = (
        f"{_size(est.weights)} weights + {_size(est.activations)} activations + "
        f"{_size(est.batch * (est.kv_per_sequence + est.logits_per_sequence))} KV cache and logits for "
        f"{limits.max_batch_size} x {limits.max_seq_len} tokens = {_size(est.total)} of {_size(est.usable)}"
    )
    if est.most_sequences == 0:
        raise CheckFailed(
            f"does not fit {where}: {parts}, and not even one full-length sequence fits beside the weights "
            "and activations; quantize (quant:), raise tp_size, lower max_seq_len or pick a larger target"
        )
    if est.total > est.usable:
        raise CheckFailed(
            f"does not fit {where}: {parts}; {est.most_sequences} full-length sequences fit, so lower "
            f"max_batch_size to {est.most_sequences} (or max_seq_len)"
        )
    return Outcome(
        f"fits {where}: {parts}; {est.most_sequences} full-length sequences fit (the largest max_batch_size)"
    )


def estimate(plan: BuildPlan, target: Target) -> Estimate:
    m, tp = plan.model, plan.config.tp_size
    item = DTYPE_BYTES[m.dtype]
    layout = plan.reader.family.layout
    weights = _weight_bytes(layout, m, tp, item, _linear_bits(plan, item))
    return Estimate(
        weights=weights,
        activations=_activation_bytes(m, tp, plan.limits.max_num_tokens, item),
        logits_per_sequence=m.vocab_size * _LOGIT_BYTES,
        kv_per_sequence=_kv_per_sequence(plan),
        usable=target.usable,
        batch=plan.limits.max_batch_size,
    )


def _linear_bits(plan: BuildPlan, item: int) -> float:
    """Bits per weight of the layer linears: the dtype's, or the quant recipe's storage + block scales."""
    if not plan.config.quant:
        return 8.0 * item
    if plan.config.quant == KEEP_GGUF:  # no ModelOpt recipe: the GGUF's own types
        return kept_linear_bits(plan.reader, item)
    recipe = quant_recipe(plan.config)
    entry = next(e for e in recipe["quant_cfg"] if e.get("quantizer_name") == "*weight_quantizer")
    q = entry["cfg"][0] if isinstance(entry["cfg"], list) else entry["cfg"]  # W4A8: the int4 stage is stored
    bits = q["num_bits"] if isinstance(q["num_bits"], int) else 1 + sum(q["num_bits"])  # (exponent, mantissa)
    blocks = q.get("block_sizes") or {}
    if blocks.get(-1):
        scale = blocks.get("scale_bits")
        bits += (1 + sum(scale) if scale else 8 * item) / blocks[-1]
    return float(bits)


def quant_recipe(cfg: BuildConfig) -> dict:
    """The `mtq.quantize` config the build runs for cfg (quant/modelopt_driver.py), with ModelOpt's
    import-time warning about untested transformers versions silenced (it has no bearing here)."""
    import warnings

    from trtserve.quant.modelopt_driver import modelopt_config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return modelopt_config(cfg.quant, cfg.kv_cache_quant, cfg.group_size, cfg.smoothquant_alpha)


def _weight_bytes(layout: Layout, m: ModelConfig, tp: int, item: int, linear_bits: float) -> int:
    kv_share = max(m.num_key_value_heads // tp, 1) / m.num_key_value_heads  # of the K / V rows per device
    total = 0.0
    for role, target in layout.trtllm_model.items():
        if role == LM_HEAD and m.tie_word_embeddings:
            continue  # the embedding serves
        n = sum(math.prod(layout.model[p].weight_shape(m)) for p in target.parts)
        total += n * item / (tp if target.split == "vocab" else 1)
    for i in range(m.num_hidden_layers):  # a layer with experts has them in place of the dense MLP
        for target in layout.layer_targets(m, i).values():
            for part in target.parts:
                src = layout.layer[part]
                shape = src.weight_shape(m)
                share = 1.0 if not target.linear else kv_share if "kv_size" in src.shape else 1 / tp
                bias = shape[0] if src.bias and getattr(m, CONFIG_FIELDS[src.bias]) else 0
                bits = linear_bits if target.linear else 8 * item
                total += (math.prod(shape) * bits / 8 + bias * item) * share
    return int(total)


def _activation_bytes(m: ModelConfig, tp: int, tokens: int, item: int) -> int:
    per_token = 4 * m.hidden_size + (m.q_size + 2 * m.kv_size + 2 * m.intermediate_size) / tp
    return int(tokens * per_token * item)


def _kv_per_sequence(plan: BuildPlan) -> int:
    bs = plan.limits.plugin_config.tokens_per_block
    blocks = -(-plan.limits.max_seq_len // bs)
    return blocks * bs * _per_device_model(plan).kv_bytes_per_token()


def _per_device_model(plan: BuildPlan) -> ModelConfig:
    """The plan's model as one device holds its KV cache: its KV heads, its KV-cache format."""
    m, tp = plan.model, plan.config.tp_size
    q = Quantization(**plan.quantization) if plan.quantization else m.quantization
    return m.model_copy(update={"num_key_value_heads": max(m.num_key_value_heads // tp, 1), "quantization": q})


def _size(n: float) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"
