"""ModelOpt's HF unified export -> TensorRT-LLM unified checkpoint tensors (rank 0, tp=1) and the
torch engine's quantized weights.

The HF export keeps q/k/v and gate/up apart (where the checkpoint does: Phi-3's fused modules are
cut into their rows); TensorRT-LLM fuses them as the family's layout says
(models/layout.py: `attention.qkv`, and `mlp.fc` = gate_proj, `mlp.gate` = up_proj, as NVIDIA's
exporter writes them; checked against `export_tensorrt_llm_checkpoint` in
tests/golden/test_quant_crosscheck.py). Fused parts must share per-tensor scales, so like NVIDIA's
exporter we take the largest and requantize the others.
"""

from __future__ import annotations

import torch

from trtserve.engine.model_config import ModelConfig
from trtserve.models.family import DecoderFamily
from trtserve.models.layout import EMBED, LM_HEAD, Layout, Names
from trtserve.models.quant_formats import KV_CACHE_FORMATS, quant_format

# HF export suffix -> TensorRT-LLM suffix.
_SUFFIX = {
    "weight": "weight",
    "bias": "bias",
    "weight_scale": "weights_scaling_factor",
    "weight_scale_2": "weights_scaling_factor_2",
    "input_scale": "activation_scaling_factor",
    "pre_quant_scale": "prequant_scaling_factor",
}

# ModelOpt's names of a layer's KV-cache scales, k_proj's and v_proj's even where q/k/v are one module (Phi-3)
_KV_SCALES = ("self_attn.k_proj.k_scale", "self_attn.v_proj.v_scale")


def _requant(w: torch.Tensor, scale: torch.Tensor, new_scale: torch.Tensor, algo: str) -> torch.Tensor:
    """Re-express a per-tensor-scaled weight with a larger scale (what NVIDIA's exporter does), in
    the dtype the format's checkpoint rules name."""
    name = quant_format(algo).checkpoint.requant_dtype
    if name is None:
        raise AssertionError(f"no requantization rule for {algo}")
    dtype = getattr(torch, name)
    top = torch.finfo(dtype).max if dtype.is_floating_point else torch.iinfo(dtype).max
    x = (w.float() * (scale / new_scale)).clamp(-top, top)
    return (x if dtype.is_floating_point else x.round()).to(dtype)


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
    rules = quant_format(algo).checkpoint
    out: dict[str, torch.Tensor] = {}
    for sfx in parts[0]:
        ts = [p[sfx] for p in parts]
        name = rules.renames.get(sfx, _SUFFIX[sfx])
        if ts[0].dim() == 0:  # per-tensor: equal after _unify
            out[name] = ts[0].reshape(rules.per_tensor_shape)
        elif sfx == "pre_quant_scale":
            if any(not torch.equal(t, ts[0]) for t in ts):
                raise ValueError("fused projections have different AWQ pre-quant scales")
            out[name] = ts[0]
        else:
            out[name] = torch.cat(ts)
    if rules.weight_view is not None:
        out["weight"] = out["weight"].view(getattr(torch, rules.weight_view))
    return rules.finish(out) if rules.finish else out


def _rescale_blocks(p: dict[str, torch.Tensor], top: torch.Tensor) -> torch.Tensor:
    ws = p["weight_scale"]
    return (ws.float() * (p["weight_scale_2"] / top)).to(ws.dtype)


def _kv_scales(hf: dict[str, torch.Tensor], p: str, kv_algo: str | None, trtllm: bool) -> dict[str, torch.Tensor]:
    if kv_algo is None:
        return {}
    k, v = (hf[p + n] for n in _KV_SCALES)
    if KV_CACHE_FORMATS[kv_algo].trtllm_unit_scale and trtllm:
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
    family: DecoderFamily,
    cfg: ModelConfig,
    algo: str,
    kv_algo: str | None,
    requant: bool = True,
) -> dict[str, torch.Tensor]:
    """The rank-0 TensorRT-LLM checkpoint of a ModelOpt HF export (`hf`: its model.safetensors,
    in the family's HF names; a module stored fused, Phi-3's qkv_proj, cut into its roles' rows), a
    tied lm_head being the embedding again. With AWQ (any `pre_quant_scale` in the export) every
    linear gets a prequant_scaling_factor. requant=False keeps each projection's own weights (see
    `_unify`), for the torch engine."""
    lay, names = family.layout, family.hf
    used: set[str] = set()
    pqs_dtypes = [t.dtype for n, t in hf.items() if n.endswith(".pre_quant_scale")]

    def take(name: str) -> torch.Tensor:
        used.add(name)
        return hf[name]

    out = {}
    for role, target in lay.trtllm_model.items():
        (part,) = target.parts  # global modules: one source each, unquantized
        if role == LM_HEAD and names.module(part) + ".weight" not in hf:
            part = EMBED  # tied: TensorRT-LLM still wants its own copy
        out[target.name + ".weight"] = take(names.module(part) + ".weight")
    linears = [target for target in lay.trtllm_layer.values() if target.linear]
    for i in range(cfg.num_hidden_layers):
        t = lay.trtllm_prefix.format(i=i)
        for target in lay.trtllm_layer.values():
            if not target.linear:  # a norm: one source, unquantized
                (part,) = target.parts
                out[f"{t}{target.name}.weight"] = take(names.module(part, i) + ".weight")
        parts = {}
        for proj in (x for target in linears for x in target.parts):
            pre = names.module(proj, i) + "."
            tensors = {n[len(pre) :]: take(n) for n in hf if n.startswith(pre) and n[len(pre) :] in _SUFFIX}
            rows = names.rows(proj, lay, cfg)
            parts[proj] = tensors if rows is None else _cut_rows(tensors, rows, names, proj, lay, cfg)
        for group in lay.shared_inputs():
            parts |= dict(zip(group, _unify([parts[g] for g in group], algo, requant), strict=True))
        for target in linears:
            fused = _fuse([parts[x] for x in target.parts], algo)
            if pqs_dtypes and "prequant_scaling_factor" not in fused:
                # The export folded AWQ's scale into the preceding norm; TensorRT-LLM's AWQ layers
                # still take a prequant_scaling_factor, which is then one.
                fused["prequant_scaling_factor"] = torch.ones(fused_in_features(fused, algo), dtype=pqs_dtypes[0])
            out |= {f"{t}{target.name}.{k}": v for k, v in fused.items()}
        kv = _kv_scales(hf, names.layer_prefix.format(i=i), kv_algo, trtllm=requant)
        used |= {n for n in (names.layer_prefix.format(i=i) + s for s in _KV_SCALES) if n in hf}
        out |= {t + k: v for k, v in kv.items()}
    unused = sorted(set(hf) - used)
    if unused:
        raise ValueError(f"the ModelOpt export holds tensors the converter does not place, e.g. {unused[0]}")
    return out


def _cut_rows(
    tensors: dict[str, torch.Tensor], rows: slice, names: Names, role: str, lay: Layout, cfg: ModelConfig
) -> dict[str, torch.Tensor]:
    """One role's share of a fused module's export: its out rows of each per-row tensor (packed int4
    holds two rows a byte, so a tensor's rows are the module's scaled to its length); per-tensor scales
    and AWQ's per-input pre-quant scale are the whole module's."""
    total = sum(lay.layer[r].weight_shape(cfg)[0] for r in names.fused[names.layer[role]])
    out = {}
    for sfx, t in tensors.items():
        if t.dim() == 0 or sfx == "pre_quant_scale":
            out[sfx] = t
            continue
        if (rows.start * t.shape[0]) % total or (rows.stop * t.shape[0]) % total:
            raise ValueError(f"{role}'s rows of its fused module do not fall on whole rows of its {sfx}")
        out[sfx] = t[rows.start * t.shape[0] // total : rows.stop * t.shape[0] // total]
    return out


def fused_in_features(fused: dict[str, torch.Tensor], algo: str) -> int:
    w = fused["weight"]
    return w.shape[1] * quant_format(algo).checkpoint.inputs_per_element


def engine_tensors(ckpt: dict[str, torch.Tensor], family: DecoderFamily, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """The torch engine's weights from `trtllm_tensors(..., requant=False)`, fused as the layout's
    `engine_tensors` says (fc and gate into one GEMM, `mlp.fc_gate`; no tied lm_head); per-tensor
    scales are shared by the parts (see `_unify`), and prequant scales of one (folded into the
    norm) are dropped."""
    out: dict[str, torch.Tensor] = {}
    for name, parts in family.layout.engine_tensors(ckpt, cfg).items():
        ts = [ckpt[p] for p in parts]
        if len(ts) > 1 and (ts[0].numel() == 1 or name.endswith("prequant_scaling_factor")):  # per-tensor, or AWQ's
            if any(not torch.equal(t, ts[0]) for t in ts):
                raise ValueError(f"{' and '.join(parts)} differ; they cannot share one GEMM")
            out[name] = ts[0]
        else:
            out[name] = torch.cat(ts) if len(ts) > 1 else ts[0]
    return {k: v for k, v in out.items() if not (k.endswith("prequant_scaling_factor") and bool((v == 1).all()))}
