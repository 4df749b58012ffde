"""Where a decoder's tensors live: its modules by role, each one's shape in ModelConfig terms, and
how they become TensorRT-LLM's checkpoint modules and the torch engine's.

Source roles name a checkpoint's modules (HF, GGUF; each family names them, family.py); target
roles name TensorRT-LLM's modules and the torch engine's. A module's tensors are `{name}.weight`
and, where the model has the module's bias feature, `{name}.bias`. `LLAMA` is the one table
Llama, Mistral, Qwen2, SmolLM3 and Granite share; `QK_NORMED` adds Qwen3's per-head q/k norms.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from trtserve.engine.model_config import ModelConfig
from trtserve.models.features import MLP_BIAS, QKV_BIAS

# Global roles every layout has, in sources and targets alike: with tied embeddings and no
# lm_head tensor, the embedding serves as lm_head.
EMBED, LM_HEAD = "embed", "lm_head"

# How tensor parallelism cuts a target: replicate; heads (each part by its attention heads, KV
# heads duplicated where fewer than ranks); rows (out dim); cols (in dim, the bias replicated);
# vocab (rows padded to a multiple of the ranks, then cut).
Split = Literal["replicate", "heads", "rows", "cols", "vocab"]


@dataclass(frozen=True)
class Names:
    """One format's module names by role."""

    model: dict[str, str]  # global role -> module name
    layer_prefix: str  # a layer's modules' prefix; "{i}" is the layer index
    layer: dict[str, str]  # per-layer role -> module name under layer_prefix
    # per-layer modules the format stores fused -> the roles they concatenate along the out dim, in
    # order (Phi-3's qkv_proj, gate_up_proj); `layer` names each of those roles by its fused module
    fused: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def module(self, role: str, layer: int | None = None) -> str:
        """A global role's module name (layer None), or a layer's."""
        return self.model[role] if layer is None else self.layer_prefix.format(i=layer) + self.layer[role]

    def rows(self, role: str, layout: Layout, cfg: ModelConfig) -> slice | None:
        """A layer role's out rows within its fused module (`fused`); None where it is stored alone."""
        roles = self.fused.get(self.layer[role], ())
        start = 0
        for r in roles:
            n = layout.layer[r].weight_shape(cfg)[0]
            if r == role:
                return slice(start, start + n)
            start += n
        return None


@dataclass(frozen=True)
class Source:
    """A source module: its weight's shape as ModelConfig attributes or fixed sizes ((out, in) for a
    linear; (num_experts, out, in) for an expert role, stored one module per expert, "{e}" in its
    name, and read stacked), the layer feature under which it also has a bias of shape (out,), and
    the layers that have it."""

    shape: tuple[str | int, ...]
    bias: str | None = None
    mlp: Literal["dense", "moe"] | None = None  # only layers with a dense MLP, or with experts; None: every layer

    def weight_shape(self, cfg: ModelConfig) -> tuple[int, ...]:
        return tuple(a if isinstance(a, int) else getattr(cfg, a) for a in self.shape)

    def in_layer(self, cfg: ModelConfig, layer: int) -> bool:
        return self.mlp is None or (self.mlp == "moe") == cfg.is_moe_layer(layer)


@dataclass(frozen=True)
class Target:
    """A TensorRT-LLM or torch-engine module: the modules concatenated into it along the out dim,
    in order (source roles for TensorRT-LLM's, TensorRT-LLM roles for the engine's), and its cut."""

    name: str
    parts: tuple[str, ...]
    split: Split = "replicate"

    @property
    def linear(self) -> bool:
        """Whether it is a layer linear (column or row parallel): what quantization applies to."""
        return self.split in ("heads", "rows", "cols")


@dataclass(frozen=True)
class Layout:
    """A decoder's tensors: its source modules by role, and the TensorRT-LLM and torch-engine
    modules they become."""

    model: dict[str, Source]  # global source roles
    layer: dict[str, Source]  # each layer's source roles
    trtllm_model: dict[str, Target]  # TensorRT-LLM's global modules (parts: global source roles)
    trtllm_prefix: str  # TensorRT-LLM's layer prefix; "{i}" is the layer index
    trtllm_layer: dict[str, Target]  # its modules under the prefix (parts: the layer's source roles)
    engine_layer: dict[str, Target]  # torch-engine modules fusing TensorRT-LLM ones; the rest are TensorRT-LLM's

    def layer_roles(self, cfg: ModelConfig, layer: int) -> dict[str, Source]:
        """The source roles one layer has (a layer with experts has no dense MLP, and the reverse)."""
        return {r: s for r, s in self.layer.items() if s.in_layer(cfg, layer)}

    def layer_targets(self, cfg: ModelConfig, layer: int) -> dict[str, Target]:
        """TensorRT-LLM's modules one layer has: those whose parts it has."""
        return {r: t for r, t in self.trtllm_layer.items() if all(self.layer[p].in_layer(cfg, layer) for p in t.parts)}

    def engine_names(self) -> Names:
        """The torch engine's module names by target role (what the decoder loads)."""
        fused = {p for t in self.engine_layer.values() for p in t.parts}
        layer = {r: t.name for r, t in self.trtllm_layer.items() if r not in fused}
        model = {r: t.name for r, t in self.trtllm_model.items()}
        return Names(model, self.trtllm_prefix, layer | {r: t.name for r, t in self.engine_layer.items()})

    def shared_inputs(self) -> list[tuple[str, ...]]:
        """The layer's source roles that read one input and are fused into one GEMM somewhere
        (TensorRT-LLM's qkv, the engine's fc_gate), so their per-tensor scales must agree."""
        groups = [t.parts for t in self.trtllm_layer.values() if len(t.parts) > 1]
        groups += [tuple(s for p in t.parts for s in self.trtllm_layer[p].parts) for t in self.engine_layer.values()]
        return groups

    def engine_tensors(self, names: Iterable[str], cfg: ModelConfig) -> dict[str, tuple[str, ...]]:
        """The torch engine's tensors from a TensorRT-LLM checkpoint's tensor names: each with the
        checkpoint tensors concatenated into it along the out dim, in order (`engine_layer`'s
        fusions, e.g. fc_gate = [fc; gate]), and no lm_head when it is tied to the embedding.
        Every suffix fuses alike (weight, bias, scales); how each is combined is the caller's."""
        fused: dict[str, tuple[str, tuple[str, ...]]] = {}  # checkpoint module -> (engine module, its parts)
        for i in range(cfg.num_hidden_layers):
            prefix = self.trtllm_prefix.format(i=i)
            for t in self.engine_layer.values():
                parts = tuple(prefix + self.trtllm_layer[p].name for p in t.parts)
                fused |= {m: (prefix + t.name, parts) for m in parts}
        head = self.trtllm_model[LM_HEAD].name
        out: dict[str, tuple[str, ...]] = {}
        for name in names:
            module, suffix = name.rsplit(".", 1)
            if module == head and cfg.tie_word_embeddings:
                continue  # the engine ties it to the embedding at load
            if module in fused:
                target, parts = fused[module]
                out[f"{target}.{suffix}"] = tuple(f"{p}.{suffix}" for p in parts)
            else:
                out[name] = (name,)
        return out


LLAMA = Layout(
    model={
        EMBED: Source(("vocab_size", "hidden_size")),
        "final_norm": Source(("hidden_size",)),
        LM_HEAD: Source(("vocab_size", "hidden_size")),
    },
    layer={
        "input_norm": Source(("hidden_size",)),
        "q_proj": Source(("q_size", "hidden_size"), QKV_BIAS),
        "k_proj": Source(("kv_size", "hidden_size"), QKV_BIAS),
        "v_proj": Source(("kv_size", "hidden_size"), QKV_BIAS),
        "o_proj": Source(("hidden_size", "q_size")),
        "post_norm": Source(("hidden_size",)),
        "gate_proj": Source(("intermediate_size", "hidden_size"), MLP_BIAS),  # the activated branch
        "up_proj": Source(("intermediate_size", "hidden_size"), MLP_BIAS),
        "down_proj": Source(("hidden_size", "intermediate_size"), MLP_BIAS),
    },
    trtllm_model={
        EMBED: Target("transformer.vocab_embedding", (EMBED,)),
        "final_norm": Target("transformer.ln_f", ("final_norm",)),
        LM_HEAD: Target("lm_head", (LM_HEAD,), "vocab"),
    },
    trtllm_prefix="transformer.layers.{i}.",
    trtllm_layer={
        "input_norm": Target("input_layernorm", ("input_norm",)),
        "qkv": Target("attention.qkv", ("q_proj", "k_proj", "v_proj"), "heads"),
        "dense": Target("attention.dense", ("o_proj",), "cols"),
        "post_norm": Target("post_layernorm", ("post_norm",)),
        # TensorRT-LLM's GatedMLP: proj(act(fc(x)) * gate(x)); fc is the activated branch.
        "fc": Target("mlp.fc", ("gate_proj",), "rows"),
        "gate": Target("mlp.gate", ("up_proj",), "rows"),
        "proj": Target("mlp.proj", ("down_proj",), "cols"),
    },
    engine_layer={"fc_gate": Target("mlp.fc_gate", ("fc", "gate"))},  # one GEMM: [fc; gate]
)

# Llama's table plus an RMSNorm over each head of q and of k (head_dim weights) before RoPE: Qwen3's.
QK_NORMED = Layout(
    model=LLAMA.model,
    layer=LLAMA.layer | {"q_norm": Source(("head_size",)), "k_norm": Source(("head_size",))},
    trtllm_model=LLAMA.trtllm_model,
    trtllm_prefix=LLAMA.trtllm_prefix,
    trtllm_layer=LLAMA.trtllm_layer
    | {"q_norm": Target("attention.q_layernorm", ("q_norm",)), "k_norm": Target("attention.k_layernorm", ("k_norm",))},
    engine_layer=LLAMA.engine_layer,
)
