"""The mixture-of-experts MLP kind: a family with experts is a dense family's layout plus these roles
(`with_experts`), and its layers with experts run `Experts` in place of the dense MLP.

Each token's router logits pick its top-k experts (softmax over all of them, then the k largest,
renormalized where the family does, as HF transformers computes them; gpt-oss: the k largest biased
logits, softmaxed); the step's tokens are grouped by expert and each expert the step uses runs once over
its tokens, so a step reads only the weights of the experts its tokens use. Every output adds its tokens'
experts in expert order, as HF's loop does. The C expert kernel (kernels/experts.c) runs these steps in
one call in prefill, op-by-op decode and the one-call decode step, for every family's experts (biased
routers and experts, the clamped SwiGLU, a shared expert, as data in its experts_t) over plain CPU weights
or W8A16 / W4A16 ones (one run-time linear of models/quantized.py per expert, read by the kernel in place);
the torch path (`Experts.grouped`) runs what it refuses (other devices, AWQ scales, int8 activations).
Each row's output depends on that row alone in both, so batching never changes a sequence's tokens
(W4A16 apart: int4.h pairs rows, as its per-op linear does).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from trtserve.engine.errors import UserError
from trtserve.engine.model_config import ModelConfig, Moe
from trtserve.kernels import experts as kernel
from trtserve.models.layout import LM_HEAD, Layout, Source, Target

DENSE_MLP = ("gate_proj", "up_proj", "down_proj")  # the dense layout's MLP roles: layers without experts only
# The expert roles: each expert's gate_proj (activated), up_proj and down_proj, stacked, and the router
EXPERTS = {
    "router": Source(("num_experts", "hidden_size"), mlp="moe"),
    "expert_gate_proj": Source(("num_experts", "moe_intermediate_size", "hidden_size"), mlp="moe"),
    "expert_up_proj": Source(("num_experts", "moe_intermediate_size", "hidden_size"), mlp="moe"),
    "expert_down_proj": Source(("num_experts", "hidden_size", "moe_intermediate_size"), mlp="moe"),
}
EXPERT_ROLES = ("expert_gate_proj", "expert_up_proj", "expert_down_proj")
# An expert every token runs too, its output scaled by sigmoid(shared_expert_gate(x)) (Qwen2-MoE)
SHARED = {
    "shared_gate_proj": Source(("moe_shared_expert_intermediate_size", "hidden_size"), mlp="moe"),
    "shared_up_proj": Source(("moe_shared_expert_intermediate_size", "hidden_size"), mlp="moe"),
    "shared_down_proj": Source(("hidden_size", "moe_shared_expert_intermediate_size"), mlp="moe"),
    "shared_expert_gate": Source((1, "hidden_size"), mlp="moe"),
}
# Their checkpoint and engine modules: one stacked tensor per role (the tensorrt backends do not build
# MoE families yet, so these are trtserve's names, not TensorRT-LLM's fused `mlp.fc`)
_TARGETS = {
    "router": Target("mlp.router", ("router",)),
    "experts_fc": Target("mlp.experts.fc", ("expert_gate_proj",)),
    "experts_gate": Target("mlp.experts.gate", ("expert_up_proj",)),
    "experts_proj": Target("mlp.experts.proj", ("expert_down_proj",)),
}
# The --quant formats families with experts build: the weight-only ones, which the build rounds itself
# (build/weight_only.py) since ModelOpt 0.47 cannot export experts; tests/golden/test_quant_moe.py
WEIGHT_ONLY = frozenset({"w8a16", "w4a16"})
# The expert targets that are linears, which weight-only formats quantize (build/weight_only.py); the router
# and the shared expert's gate stay float, as ModelOpt keeps them
EXPERT_LINEARS = frozenset({"experts_fc", "experts_gate", "experts_proj", "shared_fc", "shared_gate", "shared_proj"})
_SHARED_TARGETS = {
    "shared_fc": Target("mlp.shared_expert.fc", ("shared_gate_proj",)),
    "shared_gate": Target("mlp.shared_expert.gate", ("shared_up_proj",)),
    "shared_proj": Target("mlp.shared_expert.proj", ("shared_down_proj",)),
    "shared_expert_gate": Target("mlp.shared_expert_gate", ("shared_expert_gate",)),
}


def with_experts(base: Layout, shared: bool = False, bias: str | None = None) -> Layout:
    """A dense layout whose layers may have experts (ModelConfig.moe_layers) in place of its MLP; bias: the
    feature under which the router and each expert's projections add a bias ((E,) and (E, out))."""
    dense = {r: replace(s, mlp="dense") if r in DENSE_MLP else s for r, s in base.layer.items()}
    experts = {r: replace(s, bias=bias) for r, s in EXPERTS.items()}
    return Layout(
        model=base.model,
        layer=dense | experts | (SHARED if shared else {}),
        trtllm_model=base.trtllm_model,
        trtllm_prefix=base.trtllm_prefix,
        trtllm_layer=base.trtllm_layer | _TARGETS | (_SHARED_TARGETS if shared else {}),
        engine_layer=base.engine_layer,
    )


def moe_config(
    hf, num_experts: int, renormalize: bool, width: int, layers: list[int] | None = None, shared_width: int = 0
) -> dict:
    """ModelConfig's MoE fields; layers: those with experts (None: every layer)."""
    top_k = hf.num_experts_per_tok
    if not 1 <= top_k <= num_experts:
        raise UserError(f"num_experts_per_tok {top_k} must be between 1 and the {num_experts} experts; fix config.json")
    every = layers is None or layers == list(range(hf.num_hidden_layers))
    return dict(
        moe=Moe(num_experts=num_experts, top_k=top_k, normalization_mode=int(renormalize)),
        moe_intermediate_size=width,
        moe_layers=None if every else layers,
        moe_shared_expert_intermediate_size=shared_width,
    )


# x (T, in), weight (a (out, in) tensor or a quantized linear of models/quantized.py) -> (T, out)
Linear = Callable[[torch.Tensor, object], torch.Tensor]


@dataclass
class Reads:
    """A layer's expert weight reads over its calls: token-expert uses (rows x top_k) and the routed experts
    whose weights were read; 1 - read / uses is the share of reads a batched step shares between rows."""

    uses: int = 0
    read: int = 0

    def add(self, rows: int, top_k: int, read: int) -> None:
        self.uses += rows * top_k
        self.read += read


@dataclass
class Experts:
    """One layer's experts; called on the post-attention-normed x (T, hidden), returns the MLP's output."""

    router: torch.Tensor  # (E, hidden)
    # (E, 2 * I, hidden): each expert's [fc (activated); gate]; quantized: E linears (2 * I, hidden)
    fc_gate: torch.Tensor | list
    proj: torch.Tensor | list  # (E, hidden, I); quantized: E linears (hidden, I)
    top_k: int
    renormalize: bool  # the k weights divided by their sum
    shared_fc_gate: object | None = None  # (2 * S, hidden): the shared expert's [fc; gate], a tensor or quantized
    shared_proj: object | None = None  # (hidden, S)
    shared_gate: torch.Tensor | None = None  # (1, hidden)
    router_bias: torch.Tensor | None = None  # (E,)
    fc_gate_bias: torch.Tensor | None = None  # (E, 2 * I)
    proj_bias: torch.Tensor | None = None  # (E, hidden)
    # gpt-oss's experts (ModelConfig.swiglu_limit): (alpha, limit) of the clamped SwiGLU, and each token's
    # top-k router logits softmaxed as HF does; None: SiLU-gated, top k of the softmax
    swiglu: tuple[float, float] | None = None
    # The C kernel's view of these weights (kernels/experts.py; None: the torch path runs), and whether
    # to use it (scripts/bench_moe.py turns it off to time the torch path)
    packed: kernel.Packed | None = field(default=None, init=False, repr=False)
    use_kernel: bool = True
    reads: Reads = field(default_factory=Reads, init=False, repr=False)  # op by op (the one-call step counts none)

    def __post_init__(self):
        gates = self.router if self.shared_gate is None else torch.cat([self.router, self.shared_gate])
        self.packed = kernel.pack(
            gates, self.fc_gate, self.proj, self.top_k, self.renormalize, self.shared_fc_gate, self.shared_proj,
            self.router_bias, self.fc_gate_bias, self.proj_bias, self.swiglu,
        )  # fmt: skip

    @classmethod
    def take(
        cls,
        w: dict[str, torch.Tensor],
        modules: dict[str, str],
        cfg: ModelConfig,
        quantized: Callable[[dict[str, torch.Tensor]], object] | None = None,
    ) -> Experts:
        """Pop one layer's expert tensors from the engine's weights (modules: the layer's by role);
        quantized: builds one linear from its tensors by suffix, each expert's on its own (None: float)."""

        def pop(role: str, suffix: str = "weight") -> torch.Tensor:
            return w.pop(f"{modules[role]}.{suffix}")

        def linear(*roles: str, dim: int = 0, stacked: bool = False):
            """The roles' weights fused along the out dim (`dim`), as one tensor or quantized linears."""
            parts = [{n[len(modules[r]) + 1 :]: w.pop(n) for n in _weights(w, modules[r])} for r in roles]
            t = {sfx: torch.cat([p[sfx] for p in parts], dim=dim) for sfx in parts[0]}  # quantized: per suffix
            if quantized is None:
                return t["weight"]
            if not stacked:
                return quantized(t)
            return [quantized({s: v[e] for s, v in t.items()}) for e in range(len(t["weight"]))]

        fc_gate = linear("experts_fc", "experts_gate", dim=1, stacked=True)  # one GEMM per expert
        proj = linear("experts_proj", stacked=True)
        extras = {}
        if cfg.moe_shared_expert_intermediate_size:
            extras = dict(
                shared_fc_gate=linear("shared_fc", "shared_gate"),
                shared_proj=linear("shared_proj"),
                shared_gate=pop("shared_expert_gate"),
            )
        if cfg.swiglu_limit is not None:
            extras = dict(
                router_bias=pop("router", "bias"),
                fc_gate_bias=torch.cat([pop("experts_fc", "bias"), pop("experts_gate", "bias")], dim=1),
                proj_bias=pop("experts_proj", "bias"),
                swiglu=(cfg.swiglu_alpha, cfg.swiglu_limit),
            )
        moe = cfg.moe
        return cls(pop("router"), fc_gate, proj, moe.top_k, moe.normalization_mode == 1, **extras)

    def __call__(self, x: torch.Tensor, linear: Linear) -> torch.Tensor:
        if self.use_kernel and self.packed is not None and (ran := kernel.run(self.packed, x)) is not None:
            self.reads.add(len(x), self.top_k, ran[1])
            return ran[0]  # the same steps in one C call
        return self.grouped(x, linear)

    def grouped(self, x: torch.Tensor, linear: Linear) -> torch.Tensor:
        """The torch path: each expert the step uses runs once over its tokens, one op at a time."""
        weights, experts = self.route(x, linear)  # (T, k) each
        k = self.top_k
        flat = experts.flatten()  # (T * k,): token t's j-th expert at t * k + j
        order = torch.argsort(flat, stable=True)  # the assignments grouped by expert, tokens in order
        counts = torch.bincount(flat, minlength=self.router.shape[0])
        ends = counts.cumsum(0).tolist()
        tokens, scales = order // k, weights.flatten()[order]
        out = torch.zeros_like(x)
        used = counts.nonzero().flatten().tolist()
        self.reads.add(len(x), k, len(used))
        for e in used:  # each expert the step uses, once over its tokens
            rows = slice(ends[e] - int(counts[e]), ends[e])
            idx = tokens[rows]
            y = self._expert(x[idx], e, linear)  # (n, hidden)
            out.index_add_(0, idx, y * scales[rows, None])
        if self.shared_gate is not None:
            shared = self._mlp(x, self.shared_fc_gate, self.shared_proj, linear)
            out += torch.sigmoid(linear(x, self.shared_gate)) * shared
        return out

    def route(self, x: torch.Tensor, linear: Linear) -> tuple[torch.Tensor, torch.Tensor]:
        """Each token's top-k experts (T, k) and their weights (T, k, in x's dtype)."""
        logits = linear(x, self.router)  # (T, E)
        if self.swiglu is not None:  # HF's GptOssTopKRouter: biased logits, softmax over the top k
            top, experts = torch.topk(logits + self.router_bias, self.top_k, dim=-1)
            return torch.softmax(top, dim=-1), experts
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)  # (T, E)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        if self.renormalize:
            weights /= weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), experts

    def _expert(self, x: torch.Tensor, e: int, linear: Linear) -> torch.Tensor:
        """Expert e on its tokens x (n, hidden)."""
        if self.swiglu is None:
            return self._mlp(x, self.fc_gate[e], self.proj[e], linear)
        alpha, limit = self.swiglu
        fc, gate = (linear(x, self.fc_gate[e]) + self.fc_gate_bias[e]).chunk(2, dim=-1)  # (n, I) each
        fc, gate = fc.clamp(max=limit), gate.clamp(-limit, limit)
        return linear((gate + 1) * (fc * torch.sigmoid(fc * alpha)), self.proj[e]) + self.proj_bias[e]

    @staticmethod
    def _mlp(x: torch.Tensor, fc_gate: object, proj: object, linear: Linear) -> torch.Tensor:
        fc, gate = linear(x, fc_gate).chunk(2, dim=-1)  # (n, I) each
        return linear(F.silu(fc) * gate, proj)


def _weights(w: dict[str, torch.Tensor], module: str) -> list[str]:
    """A module's weight tensors (the weight, and a quantized one's scales), biases apart."""
    return [n for n in w if n.startswith(module + ".") and not n.endswith(".bias")]


def parameters(layout: Layout, cfg: ModelConfig) -> tuple[int, int]:
    """(total, active) parameters: a token reads its top_k of each layer's experts, the rest of every layer."""
    total = sum(
        math.prod(layout.model[p].weight_shape(cfg))
        for r, t in layout.trtllm_model.items()
        for p in t.parts
        if not (r == LM_HEAD and cfg.tie_word_embeddings)
    )
    idle = 0
    e, k = cfg.num_experts, cfg.moe.top_k if cfg.moe else 0
    for i in range(cfg.num_hidden_layers):
        for role, src in layout.layer_roles(cfg, i).items():
            n = math.prod(src.weight_shape(cfg))
            total += n
            idle += n * (e - k) // e if role in EXPERT_ROLES else 0
    return total, total - idle
