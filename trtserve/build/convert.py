"""HF-named checkpoint -> TensorRT-LLM unified checkpoint (per TP rank) and torch-engine weights.

The conversion is a plan of `TensorSpec`s built from the model config alone: every source tensor
is named, its shape asserted against config.json, and used by exactly one output (the tied
embedding is the one named exception). Producing the tensors happens later, one at a time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch

from trtserve.build.reader import CheckpointReader
from trtserve.build.safetensors_io import TensorSpec
from trtserve.errors import UserError
from trtserve.models.config import TORCH_DTYPES, ModelConfig

# Source tensors that hold no weights (recomputed at load time by every runtime).
_IGNORABLE_SUFFIXES = ("rotary_emb.inv_freq",)


def expected_source_shapes(cfg: ModelConfig, has_lm_head: bool) -> dict[str, tuple[int, ...]]:
    """Every HF tensor the config implies, with its shape ([out, in] for linears)."""
    h, v, i_sz = cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    if has_lm_head or not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (v, h)
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (cfg.q_size, h),
            p + "self_attn.k_proj.weight": (cfg.kv_size, h),
            p + "self_attn.v_proj.weight": (cfg.kv_size, h),
            p + "self_attn.o_proj.weight": (h, cfg.q_size),
            p + "mlp.gate_proj.weight": (i_sz, h),
            p + "mlp.up_proj.weight": (i_sz, h),
            p + "mlp.down_proj.weight": (h, i_sz),
        }
        if cfg.attn_bias:
            shapes |= {
                p + "self_attn.q_proj.bias": (cfg.q_size,),
                p + "self_attn.k_proj.bias": (cfg.kv_size,),
                p + "self_attn.v_proj.bias": (cfg.kv_size,),
            }
        if cfg.mlp_bias:
            shapes |= {
                p + "mlp.gate_proj.bias": (i_sz,),
                p + "mlp.up_proj.bias": (i_sz,),
                p + "mlp.down_proj.bias": (h,),
            }
    return shapes


def check_source(reader: CheckpointReader, cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Assert the checkpoint holds exactly the tensors the config implies, with those shapes."""
    names = [n for n in reader.names() if not n.endswith(_IGNORABLE_SUFFIXES)]
    expected = expected_source_shapes(cfg, has_lm_head="lm_head.weight" in names)
    missing = sorted(set(expected) - set(names))
    if missing:
        raise UserError(
            f"the checkpoint lacks {len(missing)} tensor(s) its config implies, e.g. {missing[0]}; "
            "the weights are incomplete or belong to another model"
        )
    extra = sorted(set(names) - set(expected))
    if extra:
        raise UserError(
            f"the checkpoint has {len(extra)} tensor(s) a {cfg.architecture} with this config does not use, e.g. {extra[0]}; "
            "check that config.json matches the weights"
        )
    for name, shape in expected.items():
        got = reader.shape(name)
        if got != shape:
            raise UserError(
                f"tensor {name} has shape {list(got)} but config.json implies {list(shape)}; the config and weights do not match"
            )
    return expected


def check_tp(cfg: ModelConfig, tp: int) -> None:
    kv = cfg.num_key_value_heads
    problems = []
    if cfg.num_attention_heads % tp:
        problems.append(f"num_attention_heads {cfg.num_attention_heads}")
    if cfg.intermediate_size % tp:
        problems.append(f"intermediate_size {cfg.intermediate_size}")
    if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
        problems.append(f"num_key_value_heads {kv}")
    if problems:
        raise UserError(f"--tp-size {tp} does not divide {', '.join(problems)}; choose a tp size that divides them")


def _rows(t: torch.Tensor, rank: int, parts: int) -> torch.Tensor:
    return t.chunk(parts, dim=0)[rank]


def _kv_heads_for_rank(cfg: ModelConfig, rank: int, tp: int) -> slice:
    """KV head range of a rank; with fewer KV heads than ranks, each rank holds a duplicate."""
    kv = cfg.num_key_value_heads
    if kv >= tp:
        per = kv // tp
        return slice(rank * per, (rank + 1) * per)
    head = rank * kv // tp
    return slice(head, head + 1)


def checkpoint_specs(cfg: ModelConfig, reader: CheckpointReader, rank: int, tp: int) -> list[TensorSpec]:
    """The TensorRT-LLM unified checkpoint tensors of one TP rank (fact sheet section 1)."""
    dt = TORCH_DTYPES[cfg.dtype]

    def src(name: str) -> torch.Tensor:
        return reader.load(name).to(dt)

    h, hd = cfg.hidden_size, cfg.head_size
    q_local = cfg.num_attention_heads // tp
    kv_sl = _kv_heads_for_rank(cfg, rank, tp)
    kv_local = kv_sl.stop - kv_sl.start
    i_local = cfg.intermediate_size // tp
    vocab_pad = -(-cfg.vocab_size // tp) * tp
    specs: list[TensorSpec] = []

    def add(name: str, shape: tuple[int, ...], make: Callable[[], torch.Tensor], *sources: str) -> None:
        specs.append(TensorSpec(name, shape, dt, make, sources))

    def heads(t: torch.Tensor, sl: slice) -> torch.Tensor:
        return t.unflatten(0, (-1, hd))[sl].flatten(0, 1)

    def lm_head() -> torch.Tensor:
        has_head = "lm_head.weight" in reader.names()
        w = src("lm_head.weight" if has_head else "model.embed_tokens.weight")
        w = torch.nn.functional.pad(w, (0, 0, 0, vocab_pad - cfg.vocab_size))
        return _rows(w, rank, tp)

    add(
        "transformer.vocab_embedding.weight",
        (cfg.vocab_size, h),
        lambda: src("model.embed_tokens.weight"),
        "model.embed_tokens.weight",
    )
    for i in range(cfg.num_hidden_layers):
        p, t = f"model.layers.{i}.", f"transformer.layers.{i}."
        q_sl = slice(rank * q_local, (rank + 1) * q_local)
        add(
            t + "input_layernorm.weight",
            (h,),
            lambda p=p: src(p + "input_layernorm.weight"),
            p + "input_layernorm.weight",
        )
        qkv = [p + f"self_attn.{x}_proj.weight" for x in "qkv"]
        add(
            t + "attention.qkv.weight",
            ((q_local + 2 * kv_local) * hd, h),
            lambda qkv=qkv, q_sl=q_sl: torch.cat(
                [heads(src(qkv[0]), q_sl), heads(src(qkv[1]), kv_sl), heads(src(qkv[2]), kv_sl)]
            ),
            *qkv,
        )
        if cfg.attn_bias:
            qkv_b = [p + f"self_attn.{x}_proj.bias" for x in "qkv"]
            add(
                t + "attention.qkv.bias",
                ((q_local + 2 * kv_local) * hd,),
                lambda b=qkv_b, q_sl=q_sl: torch.cat(
                    [heads(src(b[0]), q_sl), heads(src(b[1]), kv_sl), heads(src(b[2]), kv_sl)]
                ),
                *qkv_b,
            )
        o = p + "self_attn.o_proj.weight"
        add(t + "attention.dense.weight", (h, q_local * hd), lambda o=o: src(o).chunk(tp, dim=1)[rank], o)
        add(
            t + "post_layernorm.weight",
            (h,),
            lambda p=p: src(p + "post_attention_layernorm.weight"),
            p + "post_attention_layernorm.weight",
        )
        # TensorRT-LLM's GatedMLP: proj(act(fc(x)) * gate(x)); fc is the activated branch.
        for ours, theirs in (("fc", "gate_proj"), ("gate", "up_proj")):
            n = p + f"mlp.{theirs}.weight"
            add(t + f"mlp.{ours}.weight", (i_local, h), lambda n=n: _rows(src(n), rank, tp), n)
            if cfg.mlp_bias:
                b = p + f"mlp.{theirs}.bias"
                add(t + f"mlp.{ours}.bias", (i_local,), lambda b=b: _rows(src(b), rank, tp), b)
        d = p + "mlp.down_proj.weight"
        add(t + "mlp.proj.weight", (h, i_local), lambda d=d: src(d).chunk(tp, dim=1)[rank], d)
        if cfg.mlp_bias:
            add(t + "mlp.proj.bias", (h,), lambda p=p: src(p + "mlp.down_proj.bias"), p + "mlp.down_proj.bias")
    add("transformer.ln_f.weight", (h,), lambda: src("model.norm.weight"), "model.norm.weight")
    head_src = "lm_head.weight" if "lm_head.weight" in reader.names() else "model.embed_tokens.weight"
    add("lm_head.weight", (vocab_pad // tp, h), lm_head, head_src)
    return specs


def assert_each_source_used_once(
    specs: list[TensorSpec], expected: dict[str, tuple[int, ...]], cfg: ModelConfig
) -> None:
    """Every source tensor feeds exactly one output; a tied embedding also feeds lm_head."""
    uses = Counter(s for spec in specs for s in spec.sources)
    allowed = Counter(expected.keys())
    if cfg.tie_word_embeddings and "lm_head.weight" not in expected:
        allowed["model.embed_tokens.weight"] += 1
    if uses != allowed:
        diff = (uses - allowed) + (allowed - uses)
        raise AssertionError(f"conversion plan uses source tensors wrongly: {dict(diff)}")


def engine_specs(cfg: ModelConfig, reader: CheckpointReader) -> list[TensorSpec]:
    """The torch engine's weights: the rank-0 (tp=1) checkpoint with fc and gate fused into one
    GEMM ([fc; gate] on the out dim) and no lm_head when it is tied to the embedding."""
    specs = checkpoint_specs(cfg, reader, rank=0, tp=1)
    by_name = {s.name: s for s in specs}
    out: list[TensorSpec] = []
    for s in specs:
        if ".mlp.gate." in s.name or (s.name == "lm_head.weight" and cfg.tie_word_embeddings):
            continue  # fused into fc_gate below, or tied to the embedding
        if ".mlp.fc." in s.name:
            g = by_name[s.name.replace(".mlp.fc.", ".mlp.gate.")]
            s = TensorSpec(
                s.name.replace(".mlp.fc.", ".mlp.fc_gate."),
                (2 * s.shape[0], *s.shape[1:]),
                s.dtype,
                lambda s=s, g=g: torch.cat([s.make(), g.make()]),
                s.sources + g.sources,
            )
        out.append(s)
    return out
