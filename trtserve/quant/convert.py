"""ModelOpt's HF unified export -> TensorRT-LLM unified checkpoint tensors (rank 0, tp=1) and the
torch engine's quantized weights.

The HF export keeps q/k/v and gate/up apart; TensorRT-LLM fuses them (`attention.qkv`, and
`mlp.fc` = gate_proj, `mlp.gate` = up_proj, as NVIDIA's exporter writes them; checked against
`export_tensorrt_llm_checkpoint` in tests/unit/test_quant_crosscheck.py). Fused parts must share
per-tensor scales, so like NVIDIA's exporter we take the largest and requantize the others.
"""

from __future__ import annotations

import torch

from trtserve.build.safetensors_io import TensorSpec

# HF export suffix -> TensorRT-LLM suffix.
_SUFFIX = {
    "weight": "weight",
    "bias": "bias",
    "weight_scale": "weights_scaling_factor",
    "weight_scale_2": "weights_scaling_factor_2",
    "input_scale": "activation_scaling_factor",
    "pre_quant_scale": "prequant_scaling_factor",
}
# TensorRT-LLM linear -> the HF projections fused into it, in order along the output dim.
_LINEARS = {
    "attention.qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "attention.dense": ("self_attn.o_proj",),
    "mlp.fc": ("mlp.gate_proj",),  # the activated branch: proj(silu(fc(x)) * gate(x))
    "mlp.gate": ("mlp.up_proj",),
    "mlp.proj": ("mlp.down_proj",),
}
_PLAIN = {
    "input_layernorm.weight": "input_layernorm.weight",
    "post_layernorm.weight": "post_attention_layernorm.weight",
}
_FP8_MAX = 448.0


def _requant(w: torch.Tensor, scale: torch.Tensor, new_scale: torch.Tensor, algo: str) -> torch.Tensor:
    """Re-express a per-tensor-scaled weight with a larger scale (what NVIDIA's exporter does)."""
    if algo in ("FP8",):
        return (w.float() * (scale / new_scale)).clamp(-_FP8_MAX, _FP8_MAX).to(torch.float8_e4m3fn)
    raise AssertionError(f"no requantization rule for {algo}")


def _unify(parts: list[dict[str, torch.Tensor]], algo: str, requant: bool) -> list[dict[str, torch.Tensor]]:
    """Projections that read the same input (q/k/v, gate/up) get the same per-tensor scales:
    with `requant` (TensorRT-LLM) the weights are requantized to the largest weight scale; without
    (the torch engine) each keeps its weights and its scale becomes a per-row vector."""
    if len(parts) == 1:
        return parts
    if any(p.keys() != parts[0].keys() for p in parts):
        raise ValueError("projections sharing an input carry different quantization tensors")
    if "weight_scale" in parts[0] and parts[0]["weight_scale"].dim() == 0:
        top = torch.stack([p["weight_scale"] for p in parts]).max()
        if requant:
            parts = [
                p | {"weight": _requant(p["weight"], p["weight_scale"], top, algo), "weight_scale": top} for p in parts
            ]
        else:
            parts = [p | {"weight_scale": p["weight_scale"].expand(p["weight"].shape[0])} for p in parts]
    if "weight_scale_2" in parts[0]:
        top = torch.stack([p["weight_scale_2"] for p in parts]).max()
        if any(not torch.equal(p["weight_scale_2"], top) for p in parts):
            # Block scales absorb the ratio, so the dequantized weights are unchanged.
            parts = [p | {"weight_scale": _rescale_blocks(p, top), "weight_scale_2": top} for p in parts]
    if "input_scale" in parts[0]:
        top = torch.stack([p["input_scale"] for p in parts]).max()
        parts = [p | {"input_scale": top} for p in parts]
    return parts


def _fuse(parts: list[dict[str, torch.Tensor]], algo: str) -> dict[str, torch.Tensor]:
    """Fuse unified HF projections (each {suffix: tensor}) into one TensorRT-LLM linear."""
    out: dict[str, torch.Tensor] = {}
    for sfx in parts[0]:
        ts = [p[sfx] for p in parts]
        name = _SUFFIX[sfx]
        if algo == "FP8_PER_CHANNEL_PER_TOKEN" and sfx == "weight_scale":
            name = "per_channel_scale"
        if ts[0].dim() == 0:  # per-tensor: equal after _unify; NVIDIA writes NVFP4's as 0-d
            out[name] = ts[0] if algo == "NVFP4" else ts[0].reshape(1)
        elif sfx == "pre_quant_scale":
            if any(not torch.equal(t, ts[0]) for t in ts):
                raise ValueError("fused projections have different AWQ pre-quant scales")
            out[name] = ts[0]
        else:
            out[name] = torch.cat(ts)
    if out["weight"].dtype == torch.uint8 and algo in ("W4A16_AWQ", "W4A8_AWQ"):
        out["weight"] = out["weight"].view(torch.int8)  # TensorRT-LLM's dtype for packed int4
    return out


def _rescale_blocks(p: dict[str, torch.Tensor], top: torch.Tensor) -> torch.Tensor:
    ws = p["weight_scale"]
    return (ws.float() * (p["weight_scale_2"] / top)).to(ws.dtype)


def _kv_scales(hf: dict[str, torch.Tensor], p: str, kv_algo: str | None, trtllm: bool) -> dict[str, torch.Tensor]:
    if kv_algo is None:
        return {}
    k, v = hf[p + "self_attn.k_proj.k_scale"], hf[p + "self_attn.v_proj.v_scale"]
    if kv_algo == "FP8" and trtllm:
        # NVIDIA's TensorRT-LLM exporter writes 1.0 for FP8 caches (e4m3 covers the range); the
        # torch engine keeps the calibrated amax / 448, as ModelOpt's fake-quant model does.
        k = v = torch.ones((), dtype=torch.float32)
    return {
        "attention.k_cache_scaling_factor": k.reshape(1).float(),
        "attention.v_cache_scaling_factor": v.reshape(1).float(),
        "attention.kv_cache_scaling_factor": torch.maximum(k, v).reshape(1).float(),
    }


def trtllm_tensors(
    hf: dict[str, torch.Tensor],
    num_layers: int,
    algo: str,
    kv_algo: str | None,
    requant: bool = True,
) -> dict[str, torch.Tensor]:
    """The rank-0 TensorRT-LLM checkpoint of a ModelOpt HF export (`hf`: its model.safetensors).
    With AWQ (any `pre_quant_scale` in the export) every linear gets a prequant_scaling_factor.
    requant=False keeps each projection's own weights (see `_unify`), for the torch engine."""
    used: set[str] = set()
    pqs_dtypes = [t.dtype for n, t in hf.items() if n.endswith(".pre_quant_scale")]

    def take(name: str) -> torch.Tensor:
        used.add(name)
        return hf[name]

    out = {"transformer.vocab_embedding.weight": take("model.embed_tokens.weight")}
    for i in range(num_layers):
        p, t = f"model.layers.{i}.", f"transformer.layers.{i}."
        for ours, theirs in _PLAIN.items():
            out[t + ours] = take(p + theirs)
        parts = {}
        for proj in (x for projs in _LINEARS.values() for x in projs):
            pre = p + proj + "."
            parts[proj] = {n[len(pre) :]: take(n) for n in hf if n.startswith(pre) and n[len(pre) :] in _SUFFIX}
        for group in (_LINEARS["attention.qkv"], ("mlp.gate_proj", "mlp.up_proj")):
            parts |= dict(zip(group, _unify([parts[g] for g in group], algo, requant), strict=True))
        for ours, projs in _LINEARS.items():
            fused = _fuse([parts[x] for x in projs], algo)
            if pqs_dtypes and "prequant_scaling_factor" not in fused:
                # The export folded AWQ's scale into the preceding norm; TensorRT-LLM's AWQ layers
                # still take a prequant_scaling_factor, which is then one.
                fused["prequant_scaling_factor"] = torch.ones(fused_in_features(fused, algo), dtype=pqs_dtypes[0])
            out |= {f"{t}{ours}.{k}": v for k, v in fused.items()}
        kv = _kv_scales(hf, p, kv_algo, trtllm=requant)
        used |= {n for n in (p + "self_attn.k_proj.k_scale", p + "self_attn.v_proj.v_scale") if n in hf}
        out |= {t + k: v for k, v in kv.items()}
    out["transformer.ln_f.weight"] = take("model.norm.weight")
    if "lm_head.weight" in hf:
        out["lm_head.weight"] = take("lm_head.weight")
    unused = sorted(set(hf) - used)
    if unused:
        raise ValueError(f"the ModelOpt export holds tensors the converter does not place, e.g. {unused[0]}")
    return out


def fused_in_features(fused: dict[str, torch.Tensor], algo: str) -> int:
    w = fused["weight"]
    return w.shape[1] * (2 if algo == "NVFP4" else 1)


def engine_tensors(ckpt: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The torch engine's weights from `trtllm_tensors(..., requant=False)`: fc and gate fused
    into one GEMM (`mlp.fc_gate`); per-tensor scales are shared by the two (see `_unify`), and
    prequant scales of one (folded into the norm) are dropped."""
    out: dict[str, torch.Tensor] = {}
    for name, t in ckpt.items():
        if ".mlp.gate." in name:
            continue
        if ".mlp.fc." in name:
            g = ckpt[name.replace(".mlp.fc.", ".mlp.gate.")]
            fused = name.replace(".mlp.fc.", ".mlp.fc_gate.")
            if t.numel() == 1 or name.endswith("prequant_scaling_factor"):  # per-tensor, or AWQ's
                if not torch.equal(t, g):
                    raise ValueError(f"{name} differs between mlp.fc and mlp.gate; they cannot share one GEMM")
                out[fused] = t
            else:
                out[fused] = torch.cat([t, g])
            continue
        out[name] = t
    return {k: v for k, v in out.items() if not (k.endswith("prequant_scaling_factor") and bool((v == 1).all()))}


def as_specs(tensors: dict[str, torch.Tensor]) -> list[TensorSpec]:
    return [TensorSpec(n, tuple(t.shape), t.dtype, lambda t=t: t, ()) for n, t in tensors.items()]
