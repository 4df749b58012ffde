"""ModelOpt's fake-quantized model as the reference a quantized torch engine is checked against, and the
checks: the engine holds its weights quantized, and its logits agree with the reference's (cosine >=
0.999 at every position, greedy tokens equal up to near-ties)."""

from __future__ import annotations

import torch
from helpers import random_prompts

from trtserve.build.config import BuildConfig
from trtserve.models.batch import SeqChunk, make_batch
from trtserve.runtime.loader import load_engine

CALIB = dict(calib_size=4, calib_seq_len=32)
# float32 on both sides: in bf16, rounding noise between two implementations flips fp8 roundings
# of activations near a boundary, which alone costs ~0.001 of logits cosine.
DTYPE = torch.float32


def engine_logits(engine_dir, tokens: list[int]) -> torch.Tensor:
    """Float32 logits (len(tokens), vocab) of one prefill through the torch engine."""
    eng = load_engine(engine_dir, device="cpu")
    m, bs = eng.model, 16
    n_blocks = -(-len(tokens) // bs)
    kv = m.new_kv_cache(n_blocks, bs)
    group = m.cfg.num_attention_heads // m.cfg.num_key_value_heads
    batch = make_batch(
        [SeqChunk(tokens, 0, list(range(n_blocks)))], bs, logit_rows=[range(len(tokens))], gqa_group=group
    )
    return m.forward(batch, kv)


def reference_model(src, quant: str, kv: str | None, group: int, tmp_path, calib: dict = CALIB):
    """ModelOpt's fake-quantized model (its activation and KV quantizers, calibrated on the same
    text as the engine: `calib`) running the weights and activation scales of ModelOpt's own HF export, decoded here.
    The export is what trtserve converts, and it is not the fake-quant model bit for bit: ModelOpt
    rounds weights differently when exporting, gives q/k/v and gate/up their largest input amax,
    and re-smooths AWQ's gate/up scales into the norm. Hence this reference."""
    from rich.console import Console
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from trtserve.build.source import open_checkpoint
    from trtserve.quant import modelopt_driver as mo

    reader = open_checkpoint(str(src))
    model = mo.load_hf_model(reader, reader.hf_config.architectures[0], DTYPE)
    tok = AutoTokenizer.from_pretrained(str(src))
    cfg = BuildConfig(model=str(src), quant=quant, kv_cache_quant=kv, group_size=group, **calib)
    mo.quantize(model, tok, cfg, Console(quiet=True), quiet=True)
    mo.export(model, DTYPE, tmp_path / "export")
    t = load_file(str(tmp_path / "export" / "model.safetensors"))
    with torch.no_grad():
        for name, mod in model.named_modules():
            if name + ".weight_scale" in t:
                mod.weight.copy_(decode(t, name + "."))
                mod.weight_quantizer.disable()
                iq = mod.input_quantizer
                if quant == "nvfp4":
                    iq.disable()  # NVFP4 activation fake-quant needs CUDA; the engine keeps them in bf16
                    continue
                if quant == "w8a8_sq":  # the engine quantizes activations per token, not per tensor
                    iq.disable()
                    if getattr(iq, "_pre_quant_scale", None) is not None:
                        iq._pre_quant_scale.fill_(1.0)  # applied even when disabled; the hook applies it
                    mod.register_forward_pre_hook(per_token_int8(t.get(name + ".pre_quant_scale")))
                    continue
                if getattr(iq, "_pre_quant_scale", None) is not None:
                    pqs = t.get(name + ".pre_quant_scale")
                    iq._pre_quant_scale.copy_(torch.ones_like(iq._pre_quant_scale) if pqs is None else pqs)
                if name + ".input_scale" in t:  # the export gives q/k/v (gate/up) their largest amax
                    iq.amax = t[name + ".input_scale"].float() * (127.0 if iq.num_bits == 8 else 448.0)
            elif name.endswith("layernorm") or name == "model.norm":
                mod.weight.copy_(t[name + ".weight"])  # AWQ scales folded in by the export
    return model


def per_token_int8(pre_quant_scale):
    """A forward pre-hook: smooth the input, then round each token to int8 steps of its amax / 127."""

    def hook(_mod, args):
        x = args[0] if pre_quant_scale is None else args[0] * pre_quant_scale.to(args[0].dtype)
        step = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-8) / 127
        return ((x / step).round().clamp(-127, 127) * step,)

    return hook


def decode(t: dict, p: str) -> torch.Tensor:
    """An exported weight: int8 / fp8 x scale; int4 (two per byte along the output dim, row 2i
    low) x group scale (W4A8: then rounded through e4m3 with weight_scale_2); NVFP4 E2M1 (two per byte along the input, even index low) x fp8
    block scale (16 inputs) x global scale."""
    w, s = t[p + "weight"], t[p + "weight_scale"]
    if w.dtype in (torch.int8, torch.float8_e4m3fn):
        out = w.float() * (s.float() if s.dim() == 0 else s.float()[:, None])
    elif s.dtype == torch.float8_e4m3fn:
        e2m1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
        lut = torch.tensor(e2m1 + [-v for v in e2m1])
        codes = torch.stack([w & 15, w >> 4], dim=-1).reshape(w.shape[0], -1).long()
        out = lut[codes] * s.float().repeat_interleave(16, dim=1) * t[p + "weight_scale_2"].float()
    else:
        b = w.view(torch.int8)
        q = torch.stack([(b << 4) >> 4, b >> 4], dim=1).reshape(-1, w.shape[1]).float()
        out = q * s.float().repeat_interleave(q.shape[1] // s.shape[1], dim=1)
        if p + "weight_scale_2" in t:  # W4A8: ModelOpt rounds the group-dequantized weight through e4m3
            s2 = t[p + "weight_scale_2"].float()
            out = (out / s2).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s2
    return out.to(DTYPE)


def resident_bytes(model) -> int:
    """Bytes of every tensor the loaded engine holds for its weights, quantized kernels included."""
    seen, total = set(), 0

    def add(obj):
        nonlocal total
        for v in vars(obj).values() if not isinstance(obj, torch.Tensor) else [obj]:
            if isinstance(v, torch.Tensor) and v.data_ptr() not in seen:
                seen.add(v.data_ptr())
                total += v.numel() * v.element_size()
            elif (
                hasattr(v, "__dict__")
                and not isinstance(v, torch.Tensor)
                and type(v).__module__ == "trtserve.models.quantized"
            ):
                add(v)

    add(model)
    for layer in model.layers:
        add(layer)
    return total


def assert_matches_reference(out, ref_model, quant: str, min_cos: float = 0.999) -> None:
    """The engine at `out` against `reference_model`'s model on three random prompts."""
    # Weights stay quantized in memory: what the engine holds is about what the file holds.
    file_bytes = (out / "model.safetensors").stat().st_size
    assert resident_bytes(load_engine(out, device="cpu").model) <= 1.1 * file_bytes
    for tokens in random_prompts(3, seed=11, lo=8, hi=48):
        ours = engine_logits(out, tokens)  # (T, vocab)
        with torch.inference_mode():
            ref = ref_model(torch.tensor([tokens])).logits[0].float()  # (T, vocab)
        cos = torch.nn.functional.cosine_similarity(ours, ref, dim=-1)
        assert cos.min() >= min_cos, f"{quant}: logits cosine {cos.min():.5f} at position {cos.argmin()}"
        top = ref.argmax(-1)
        mine = ours.argmax(-1)
        gap = ref.gather(1, top[:, None]) - ref.gather(1, mine[:, None])  # 0 where equal
        spread = ref.max(-1).values - ref.min(-1).values
        assert (gap[:, 0] <= 0.01 * spread).all(), f"{quant}: greedy token differs beyond a near-tie"
        assert (mine == top).float().mean() >= 0.8
