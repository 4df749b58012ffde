"""The decoder forward pass over a flat batch and a paged KV cache, for every family.

Weights come from the engine's model.safetensors, named by the family's layout (models/layout.py:
TensorRT-LLM's names; fused qkv and fc_gate).
Numerics follow HF transformers (RMSNorm in float32, residuals in the model dtype, logits cast
to float32) so greedy output matches it token for token.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from trtserve.engine import kv_sizing
from trtserve.engine.errors import UserError
from trtserve.engine.model_config import ModelConfig
from trtserve.engine.options import EngineOptions, check_requirements
from trtserve.kernels import decode_layers, dense, int4, native, pointwise
from trtserve.models import deterministic as det
from trtserve.models import host_memory
from trtserve.models.batch import FlatBatch
from trtserve.models.dtypes import TORCH_DTYPES
from trtserve.models.features import LORA, SCALED_EMBEDDINGS
from trtserve.models.kv_cache import PagedKVCache
from trtserve.models.layout import EMBED, LM_HEAD
from trtserve.models.lora_step import LoraStep
from trtserve.models.moe import Experts
from trtserve.models.paged_attention import LayerAttention
from trtserve.models.registry import family_for_trtllm
from trtserve.models.rope import Rope

log = logging.getLogger(__name__)

# A linear's weight: a (out, in) tensor, or a quantized kernel object (trtserve/models/quantized.py).
Linear = torch.Tensor | Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]


@dataclass
class Layer:
    input_norm: torch.Tensor  # (hidden,)
    qkv: Linear  # (q_size + 2 * kv_size, hidden)
    qkv_bias: torch.Tensor | None  # (q_size + 2 * kv_size,)
    dense: Linear  # (hidden, q_size)
    post_norm: torch.Tensor  # (hidden,)
    fc_gate: Linear | None  # (2 * intermediate, hidden): [activated fc; gate]; None in a layer with experts
    fc_gate_bias: torch.Tensor | None
    proj: Linear | None  # (hidden, intermediate); None in a layer with experts
    proj_bias: torch.Tensor | None
    kv_scale: torch.Tensor | None = None  # (2,) K and V scales of an 8-bit KV cache
    q_norm: torch.Tensor | None = None  # (head_dim,): RMSNorm over each q head before RoPE (features.QK_NORM);
    k_norm: torch.Tensor | None = None  # the same over each k head; (q_size,), (kv_size,): over all heads (OLMoE)
    experts: Experts | None = None  # the layer's MLP where it has experts (ModelConfig.moe_layers)
    attn_out_norm: torch.Tensor | None = None  # (hidden,): attention's output normed before its add (SANDWICH_NORMS)
    mlp_out_norm: torch.Tensor | None = None  # (hidden,): the MLP's output normed so too
    dense_bias: torch.Tensor | None = None  # (hidden,): o_proj's bias (features.ATTN_OUT_BIAS)
    sinks: torch.Tensor | None = None  # (heads,): each head's sink logit (features.ATTN_SINKS)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float = 0.0) -> torch.Tensor:
    """RMSNorm as HF: Llama's scales in the model dtype; with an offset, Gemma's by (offset + weight) in float32."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if offset:
        return (xf * (offset + weight.float())).to(x.dtype)
    return weight * xf.to(x.dtype)


class DecoderModel:
    def __init__(
        self,
        cfg: ModelConfig,
        weights: dict[str, torch.Tensor],
        max_positions: int,
        device: torch.device,
        options: EngineOptions | None = None,
    ):
        options = options or EngineOptions()
        self.cfg = cfg
        self.options = options
        deterministic = self.deterministic = options.deterministic
        # Batch-invariant kernels (fixed row tiles) when asked for; the fast ones otherwise.
        self.linear = det.linear if deterministic else dense.linear  # F.linear, our kernel at decode
        self.device = device
        self.dtype = TORCH_DTYPES[cfg.dtype]
        family = self.family = family_for_trtllm(cfg.architecture)
        names = family.layout.engine_names()
        w = {k: v.to(device) for k, v in weights.items()}
        self.embed = w.pop(names.module(EMBED) + ".weight")  # (vocab, hidden)
        self.final_norm = w.pop(names.module("final_norm") + ".weight")
        self.lm_head = w.pop(names.module(LM_HEAD) + ".weight", None)
        if self.lm_head is None:
            self.lm_head = self.embed
        else:
            self.lm_head = self.lm_head[: cfg.vocab_size]
        self.layers = []
        for i in range(cfg.num_hidden_layers):
            p = names.layer_prefix.format(i=i)
            m = {role: p + name for role, name in names.layer.items()}  # this layer's modules by role
            kv_scales = [w.pop(p + f"attention.{x}_cache_scaling_factor", None) for x in "kv"]
            w.pop(p + "attention.kv_cache_scaling_factor", None)  # TensorRT-LLM's max of the two
            self.layers.append(
                Layer(
                    input_norm=w.pop(m["input_norm"] + ".weight"),
                    qkv=self._take_linear(w, m["qkv"]),
                    qkv_bias=w.pop(m["qkv"] + ".bias", None),
                    dense=self._take_linear(w, m["dense"]),
                    post_norm=w.pop(m["post_norm"] + ".weight"),
                    fc_gate=None if cfg.is_moe_layer(i) else self._take_linear(w, m["fc_gate"]),
                    fc_gate_bias=w.pop(m["fc_gate"] + ".bias", None),
                    proj=None if cfg.is_moe_layer(i) else self._take_linear(w, m["proj"]),
                    proj_bias=w.pop(m["proj"] + ".bias", None),
                    kv_scale=None if kv_scales[0] is None else torch.cat(kv_scales),
                    q_norm=w.pop(m["q_norm"] + ".weight") if "q_norm" in m else None,
                    k_norm=w.pop(m["k_norm"] + ".weight") if "k_norm" in m else None,
                    experts=Experts.take(w, m, cfg, self._quantized()) if cfg.is_moe_layer(i) else None,
                    dense_bias=w.pop(m["dense"] + ".bias", None),
                    **{r: w.pop(m[r] + ".weight") for r in ("attn_out_norm", "mlp_out_norm", "sinks") if r in m},
                )
            )
        if w:
            raise ValueError(f"unused engine weights: {sorted(w)[:5]}")
        self.rope = Rope(cfg, max_positions, self.dtype, device)
        # the windowed layers' RoPE where they rotate by their own base (features.LOCAL_ROPE), unscaled
        local = cfg.rotary_base_local is not None and cfg.model_copy(
            update={"rotary_base": cfg.rotary_base_local, "rotary_scaling": None}
        )
        self.local_rope = Rope(local, max_positions, self.dtype, device) if local else None
        self.scale = cfg.head_size**-0.5 if cfg.attention_multiplier is None else cfg.attention_multiplier
        skip = frozenset(cfg.rope_skip_layers or ())  # layers attending without RoPE (features.NOPE_LAYERS)
        self.layer_ropes = [  # each layer's RoPE: its window's own where it has one (features.LOCAL_ROPE); None: none
            None if i in skip else self.local_rope if self._local(i) else self.rope
            for i in range(cfg.num_hidden_layers)
        ]
        self.attention = [  # each layer's, within its window (ModelConfig.window)
            LayerAttention(
                cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_size, self.scale, cfg.window(i),
                cfg.attn_logit_softcapping, deterministic, self.layers[i].sinks,
            )
            for i in range(cfg.num_hidden_layers)
        ]  # fmt: skip
        # Every layer of a decode step in one C call (plain, W8A16 or W4A16 weights on CPU) where it
        # implements each of the model's layer features, else None
        n_h, n_kv, hd, hidden, inter = (
            cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_size, cfg.hidden_size, cfg.intermediate_size
        )  # fmt: skip
        shapes = {
            "qkv": ((n_h + 2 * n_kv) * hd, hidden), "dense": (hidden, n_h * hd), "fc_gate": (2 * inter, hidden),
            "proj": (hidden, inter),
        }  # fmt: skip
        check_requirements(options, self)  # an option this model or machine cannot honour is refused, not dropped
        if options.int8_activations:  # before decode_layers.pack, which reads each linear's setting
            for t in self.linears():
                t.int8_activations = True
        features = family.features_of(cfg)
        # Gemma rounds sqrt(hidden) to the model dtype before scaling (features.SCALED_EMBEDDINGS)
        self.embed_scale = cfg.embedding_multiplier
        if SCALED_EMBEDDINGS in features:
            self.embed_scale = float(torch.tensor(self.embed_scale, dtype=self.dtype))
        step = not deterministic and self._implements(decode_layers, "the one-call decode step", features)
        # the step reads every layer's tables at the global RoPE's rows: LongRoPE's long half has no local twin
        step = step and not (self.local_rope and self.rope.long_from is not None)
        step_model = decode_layers.Step(
            tables=[None if r is None else (r.cos, r.signed_sin) for r in self.layer_ropes],
            windows=[cfg.window(i) for i in range(cfg.num_hidden_layers)], rotary_dim=self.rope.rotary_dim,
            offset=cfg.norm_weight_offset, resid=cfg.residual_multiplier, softcap=cfg.attn_logit_softcapping,
            act=cfg.hidden_act,
        )  # fmt: skip
        self.step_weights = decode_layers.pack(self.layers, self.dtype, shapes, step_model) if step else None
        # Whether the one-call step runs rows under LoRA adapters too; where not, such steps run op by op
        self.step_lora = LORA in decode_layers.STEP_FEATURES
        # The per-token glue as our C kernels (decode-sized CPU batches) where they fit the model
        self.use_pointwise = not deterministic and self._implements(pointwise, "the pointwise kernels", features)

    def _local(self, layer: int) -> bool:
        """Whether the layer rotates by the local RoPE (features.LOCAL_ROPE: a windowed layer of such a model)."""
        return self.local_rope is not None and self.cfg.window(layer) is not None

    def linears(self) -> list[Linear]:
        """Every layer's linears (decode_layers.LINEARS), layer by layer."""
        return [getattr(layer, f) for layer in self.layers for f in decode_layers.LINEARS]

    @staticmethod
    def _implements(kernels, what: str, features: frozenset[str]) -> bool:
        """Whether a fast path implements every layer feature of the model (logged where not)."""
        lacks = features - kernels.FEATURES
        if lacks:
            log.info("%s not used: no support for this model's %s", what, ", ".join(sorted(lacks)))
        return not lacks

    def _take_linear(self, w: dict[str, torch.Tensor], prefix: str) -> Linear:
        """Pop one linear's tensors: the plain weight, or a quantized kernel built from them all."""
        quantized = self._quantized()
        if quantized is None:
            return w.pop(prefix + ".weight")  # (out, in): F.linear's layout and the decode kernel's
        names = [n for n in w if n.startswith(prefix + ".") and not n.endswith(".bias")]
        return quantized({n[len(prefix) + 1 :]: w.pop(n) for n in names})

    def _quantized(self) -> Callable[[dict[str, torch.Tensor]], Linear] | None:
        """How one linear's tensors (by suffix) become its quantized kernel; None: unquantized."""
        quant = self.cfg.quantization
        if quant.quant_algo is None:
            return None
        from trtserve.models.quantized import make_linear

        group = getattr(quant, "group_size", None) or 128
        return lambda t: make_linear(t, quant.quant_algo, self.dtype, group)

    def _mm(self, x: torch.Tensor, weight: Linear, bias: torch.Tensor | None = None) -> torch.Tensor:
        if isinstance(weight, torch.Tensor):
            return self.linear(x, weight, bias)
        if self.deterministic:  # quantized linears pick their kernel by row count: fixed tiles fix it
            return det.tiled(lambda t: weight(t, bias), x)
        return weight(x, bias)

    @classmethod
    def load(
        cls,
        path: Path,
        cfg: ModelConfig,
        max_positions: int,
        device: torch.device,
        options: EngineOptions | None = None,
    ) -> DecoderModel:
        weights = load_file(str(path))
        # the decode GEMV streams them: huge pages spare it a TLB miss every 4 KB. Only where the model keeps
        # the tensors as loaded: quantized linears repack theirs and experts concatenate fc and gate, and the
        # one shared map would then hold a dead copy of those (+90% of an int4 engine's weight bytes)
        if device.type == "cpu" and cfg.quantization.quant_algo is None and cfg.moe is None:
            weights = host_memory.move(weights)
        return cls(cfg, weights, max_positions, device, options)

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        eps, offset = self.cfg.norm_epsilon, self.cfg.norm_weight_offset
        if self.deterministic:
            return det.tiled(lambda t: rms_norm(t, w, eps, offset), x)
        return rms_norm(x, w, eps, offset)

    def new_kv_cache(self, num_blocks: int, tokens_per_block: int) -> PagedKVCache:
        kv_algo = self.cfg.quantization.kv_cache_quant_algo
        scales = torch.stack([layer.kv_scale for layer in self.layers]).float() if kv_algo else None  # (layers, 2)
        name = self.options.kv_cache_dtype
        kv_dtype = None if name == "auto" else getattr(torch, name)
        return PagedKVCache(self.cfg, num_blocks, tokens_per_block, self.dtype, self.device, kv_algo, scales, kv_dtype)

    def decode_step_rows(self) -> int | None:
        """The most rows a decode step (with proposals to verify) runs as the one-call C step; None: no
        such step here, so rows have no cliff to stay under."""
        if self.step_weights is None:
            return None
        return min(dense.max_rows(self.dtype), self.step_weights.max_rows)

    @torch.inference_mode()
    def forward(self, batch: FlatBatch, kv: PagedKVCache, lora: LoraStep | None = None) -> torch.Tensor:
        """Run every token of the batch; returns float32 logits (B, vocab) at each sequence's last token.
        lora: the rows that run under LoRA adapters (None: every row runs the base model)."""
        return self.logits(self.run(batch, kv, lora)[batch.logits_indices])

    @torch.inference_mode()
    def run(self, batch: FlatBatch, kv: PagedKVCache, lora: LoraStep | None = None) -> torch.Tensor:
        """Run every token of the batch; returns the residual stream after the last layer (T, hidden)."""
        h = self.embed[batch.token_ids]  # (T, hidden): the residual stream, updated in place
        if self.embed_scale != 1.0:
            h.mul_(self.embed_scale)
        if batch.embeds is not None:  # an image's rows: the vision encoder's output (HF's masked_scatter)
            h[batch.embeds[0]] = batch.embeds[1].to(h.dtype)
        if not self._decode_step(h, batch, kv, lora):
            self._layers(h, batch, kv, lora)
        return h

    def final_hidden(self, rows: torch.Tensor) -> torch.Tensor:
        """Rows (N, hidden) of run()'s residual stream after the final norm: HF's last_hidden_state."""
        return self._norm(rows, self.final_norm)

    @torch.inference_mode()
    def logits(self, rows: torch.Tensor) -> torch.Tensor:
        """Float32 logits (N, vocab) of rows (N, hidden) of run()'s residual stream."""
        last = self.final_hidden(rows)  # (N, hidden)
        logits = self.linear(last, self.lm_head)  # (N, vocab)
        if self.cfg.logits_scaling != 1.0:
            logits = logits / self.cfg.logits_scaling
        if (cap := self.cfg.final_logit_softcapping) is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits.float()

    def _decode_step(self, h: torch.Tensor, batch: FlatBatch, kv: PagedKVCache, lora: LoraStep | None) -> bool:
        """Every layer in one C call (decode_layers.c) when each sequence runs one decode token (and the
        proposals it verifies), the rows are as many as the decode GEMM takes, attention needs no 8-bit
        cache, and LoRA rows (if any) run stacked (not per segment, as deterministic mode runs them); False
        otherwise."""
        cfg, rows = self.cfg, h.shape[0]
        packed_lora = None
        if lora is not None:
            if self.step_weights is None or not self.step_lora or lora.stacked is None:
                return False
            s = lora.stacked
            if s.native is None:  # packed once per set of adapters
                s.native = decode_layers.pack_lora(s.layers, self.dtype) or False
            if s.native is False:
                return False
            packed_lora = s.native
        if self.step_weights is None or not batch.decoding or kv.kv_quant is not None or rows > self.decode_step_rows():
            return False
        # a sequence verifying proposals has a row each, under its block table: the kernel writes every row's
        # key and value before any row attends, each up to its own position, as a decode row would
        tables = batch.block_tables if rows == batch.block_tables.shape[0] else batch.block_tables[batch.seq_ids]
        return decode_layers.run(
            self.step_weights, h, kv.data, cfg.num_attention_heads, cfg.intermediate_size, cfg.norm_epsilon,
            self.scale, self.rope.rows(batch.positions, batch.prompt_lens), batch.positions, batch.slot_mapping, tables,
            kv.tokens_per_block, packed_lora, lora.spans if lora is not None else None,
        )  # fmt: skip

    def _layers(self, h: torch.Tensor, batch: FlatBatch, kv: PagedKVCache, lora: LoraStep | None = None) -> None:
        """Every layer, op by op, on the residual stream h (updated in place); each linear's output
        gains the LoRA update of the adapter its rows run under."""
        n_h, hd = self.cfg.num_attention_heads, self.cfg.head_size
        rows = self.rope.rows(batch.positions, batch.prompt_lens)
        rope = rows, self.rope.tables(rows)
        local = (batch.positions, self.local_rope.tables(batch.positions)) if self.local_rope else rope
        x = self._add_norm(h, None, self.layers[0].input_norm)
        for i, layer in enumerate(self.layers):
            qkv = self._lora_mm(lora, i, "qkv", x, layer.qkv, layer.qkv_bias)  # (T, (n_h + 2 n_kv) * hd)
            q = self._rope_kv(i, qkv, batch, kv, *(local if self._local(i) else rope)).view(-1, n_h, hd)
            attn = self.attention[i](i, q, batch, kv)  # (T, n_h * hd)
            attn_out = self._residual(
                self._out_norm(
                    self._lora_mm(lora, i, "dense", attn, layer.dense, layer.dense_bias), layer.attn_out_norm
                )
            )
            x = self._add_norm(h, attn_out, layer.post_norm)
            out = self._residual(self._out_norm(self._mlp(i, layer, x, lora), layer.mlp_out_norm))
            if i + 1 < len(self.layers):
                x = self._add_norm(h, out, self.layers[i + 1].input_norm)
            else:
                h.add_(out)

    def _out_norm(self, out: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
        """A block's output, RMS-normed before its residual add where the layer has that norm (SANDWICH_NORMS)."""
        if w is None:
            return out
        eps, offset = self.cfg.norm_epsilon, self.cfg.norm_weight_offset
        if self._fused(out) and (y := pointwise.add_rms_norm(out, None, w, eps, offset)) is not None:
            return y
        return self._norm(out, w)

    def _residual(self, delta: torch.Tensor) -> torch.Tensor:
        """A block's output as the residual stream adds it (scaled by features.RESIDUAL_SCALE's multiplier)."""
        r = self.cfg.residual_multiplier
        return delta if r == 1.0 else delta * r

    def _lora_mm(
        self, lora: LoraStep | None, layer: int, role: str, x: torch.Tensor, weight: Linear, bias=None
    ) -> torch.Tensor:
        """x·Wᵀ + b, plus each adapter's scaled x·Aᵀ·Bᵀ on its rows (batch-invariant in deterministic mode:
        self.linear runs fixed tiles there)."""
        out = self._mm(x, weight, bias)
        return out if lora is None else lora.add(layer, role, x, out, self.linear)

    def _fused(self, x: torch.Tensor) -> bool:
        """Whether the per-token glue runs as our C kernels (decode-sized CPU batches) or torch ops."""
        return self.use_pointwise and pointwise.usable(x)

    def _add_norm(self, h: torch.Tensor, delta: torch.Tensor | None, w: torch.Tensor) -> torch.Tensor:
        """h += delta (in place, in the model dtype), then RMSNorm(h) * w."""
        eps, offset = self.cfg.norm_epsilon, self.cfg.norm_weight_offset
        if self._fused(h) and (y := pointwise.add_rms_norm(h, delta, w, eps, offset)) is not None:
            return y
        if delta is not None:
            h.add_(delta)
        return self._norm(h, w)

    def _rope_kv(
        self, layer: int, qkv: torch.Tensor, batch: FlatBatch, kv: PagedKVCache, rows: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:  # fmt: skip
        """Rotated q (T, n_h * hd); the rotated k and the v go to the KV cache at the batch's slots. rows: the
        tokens' rows of the layer's RoPE tables; rope: those rows' (cos, signed sin)."""
        n_h, n_kv, hd = self.cfg.num_attention_heads, self.cfg.num_key_value_heads, self.cfg.head_size
        w, r = self.layers[layer], self.layer_ropes[layer]
        keys, values = kv.stored_keys(layer), kv.stored_values(layer)  # None for an 8-bit cache
        if keys is not None and self._fused(qkv):
            cos, sin = (None, None) if r is None else (r.cos, r.signed_sin)
            q = pointwise.rope_kv(
                qkv, n_h, n_kv, cos, sin, rows, keys, values, batch.slot_mapping, w.q_norm, w.k_norm,
                self.cfg.norm_epsilon, self.cfg.norm_weight_offset,
            )  # fmt: skip
            if q is not None:
                return q
        qkv = qkv.view(-1, n_h + 2 * n_kv, hd)
        qk = qkv[:, : n_h + n_kv]
        if w.q_norm is not None:  # per head as HF's q_norm / k_norm, or over all heads at once (OLMoE's)
            q, k = (t.flatten(1) if w.q_norm.numel() > hd else t for t in (qk[:, :n_h], qk[:, n_h:]))
            q, k = self._norm(q, w.q_norm).view(-1, n_h, hd), self._norm(k, w.k_norm).view(-1, n_kv, hd)
            qk = torch.cat([q, k], dim=1)
        if r is not None:
            qk = Rope.apply(qk, rope)  # q and k heads rotated in one pass
        q, k = qk.split([n_h, n_kv], dim=1)  # (T, n_h, hd), (T, n_kv, hd)
        kv.write(layer, batch.slot_mapping, k, qkv[:, n_h + n_kv :])
        return q

    def _mlp(self, i: int, layer: Layer, x: torch.Tensor, lora: LoraStep | None) -> torch.Tensor:
        """The layer's MLP on the normed x (T, hidden): its experts (models/moe.py), or the dense MLP."""
        if layer.experts is not None:
            return layer.experts(x, self._mm)  # _mm: quantized experts' linears too
        fc_gate = self._lora_mm(lora, i, "fc_gate", x, layer.fc_gate, layer.fc_gate_bias)  # (T, 2 I): [fc | gate]
        return self._lora_mm(lora, i, "proj", self._act_mul(fc_gate), layer.proj, layer.proj_bias)

    def _act_mul(self, fc_gate: torch.Tensor) -> torch.Tensor:
        """act(fc) * gate over [fc | gate] (T, 2 I): SiLU, or GeGLU's tanh GELU (features.GELU_TANH_GATED_MLP)."""
        if self._fused(fc_gate) and (y := pointwise.act_mul(fc_gate, self.cfg.hidden_act)) is not None:
            return y
        fc, gate = fc_gate.chunk(2, dim=-1)  # (T, I) each
        if self.cfg.hidden_act == "gelu_pytorch_tanh":
            return F.gelu(fc, approximate="tanh") * gate
        return F.silu(fc) * gate


def check_kv_cache_dtype(model: DecoderModel, value: str) -> None:
    """OPTIONS["kv_cache_dtype"]' requirement (engine/kv_sizing.py has the rule)."""
    kv_sizing.check_kv_cache_dtype(model.cfg, value)


def check_int8_activations(model: DecoderModel, value: bool) -> None:
    """OPTIONS["int8_activations"]' requirement: int4 group-wise weights, on a CPU with int4.h's
    int8-activation build; a UserError naming what is missing where they are not there."""
    if not value:
        return
    if any(layer.experts is not None for layer in model.layers):
        raise UserError(
            "int8_activations is not supported for mixture-of-experts engines (their expert kernel runs int4 "
            "weights on float activations): remove it from the run config's engine section"
        )
    if not all(hasattr(t, "int8_activations") for t in model.linears()):
        algo = model.cfg.quantization.quant_algo or "unquantized"
        raise UserError(
            f"int8_activations applies to engines with int4 group-wise weights (--quant w4a16 / w4a16_awq); "
            f"this engine is {algo}: remove it from the run config's engine section"
        )
    if model.device.type != "cpu" or not int4.int8_activations_available():
        raise UserError(
            f"int8_activations needs the CPU kernels' AVX-512 build with VNNI and VBMI (this machine: "
            f"{model.device.type}, {native.cpu_model()}): remove it from the run config's engine section"
        )
