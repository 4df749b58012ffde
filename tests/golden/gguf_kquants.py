"""Quantized GGUF files for tests: a tiny HF model written as llama.cpp lays it out (helpers.write_gguf),
then each chosen tensor's bytes filled with its real quantization. gguf-py quantizes Q4_0, Q4_1, Q5_0,
Q5_1 and Q8_0; Q4_K and Q6_K are encoded here (simple min/max scales: llama.cpp's search for the
best scales is not needed for a layout test)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType as T
from gguf import quants
from helpers import _permute, write_gguf
from safetensors.torch import load_file

from trtserve.build.gguf_reader import GGUFReader
from trtserve.models.batch import SeqChunk, make_batch
from trtserve.runtime.loader import load_engine

# What llama.cpp's Q4_K_M recipe gives a small model: Q4_K linears, Q6_K for attn_v / ffn_down
# (here every other layer) and for the output head.
Q4_K_M = "Q4_K_M"


def _f16_bytes(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.astype(np.float16)).view(np.uint8).reshape(-1, 2)


def encode_q4_k(w: np.ndarray) -> np.ndarray:
    """(rows, n) float32 -> Q4_K bytes (rows, n / 256 * 144): w ~ d sc q - dmin m per 32 values."""
    x = w.reshape(-1, 8, 32).astype(np.float32)  # (super-blocks, sub-blocks, values)
    lo, hi = np.minimum(x.min(-1), 0), x.max(-1)
    scale, low = (hi - lo) / 15, -lo  # (sb, 8)
    d = np.maximum(scale.max(-1, keepdims=True), 1e-8) / 63
    dmin = np.maximum(low.max(-1, keepdims=True), 1e-8) / 63
    d, dmin = d.astype(np.float16).astype(np.float32), dmin.astype(np.float16).astype(np.float32)
    sc = np.clip(np.round(scale / d), 1, 63).astype(np.uint8)
    mn = np.clip(np.round(low / dmin), 0, 63).astype(np.uint8)
    step, off = (d * sc)[..., None], (dmin * mn)[..., None]
    q = np.clip(np.round((x + off) / step), 0, 15).astype(np.uint8)  # (sb, 8, 32)
    packed = np.empty((x.shape[0], 12), dtype=np.uint8)
    packed[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    packed[:, 4:8] = mn[:, :4] | ((mn[:, 4:] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:] & 0x0F) | ((mn[:, 4:] & 0x0F) << 4)
    qs = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(-1, 128)  # chunk c: sub-block 2c low, 2c + 1 high
    blocks = np.concatenate([_f16_bytes(d), _f16_bytes(dmin), packed, qs], axis=1)
    return blocks.reshape(w.shape[0], -1)


def encode_q6_k(w: np.ndarray) -> np.ndarray:
    """(rows, n) float32 -> Q6_K bytes (rows, n / 256 * 210): w ~ d sc q, q in [-32, 31] per 16 values."""
    x = w.reshape(-1, 16, 16).astype(np.float32)
    scale = np.abs(x).max(-1) / 31  # (sb, 16)
    d = (np.maximum(scale.max(-1, keepdims=True), 1e-8) / 127).astype(np.float16).astype(np.float32)
    sc = np.clip(np.round(scale / d), 1, 127).astype(np.int8)
    q6 = (np.clip(np.round(x / (d * sc)[..., None]), -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 128)
    ql = (q6[:, :, :64] & 0x0F) | ((q6[:, :, 64:] & 0x0F) << 4)  # (sb, 2, 64)
    hb = (q6 >> 4).reshape(-1, 2, 4, 32)
    qh = hb[:, :, 0] | (hb[:, :, 1] << 2) | (hb[:, :, 2] << 4) | (hb[:, :, 3] << 6)  # (sb, 2, 32)
    blocks = np.concatenate([ql.reshape(-1, 128), qh.reshape(-1, 64), sc.view(np.uint8), _f16_bytes(d)], axis=1)
    return blocks.reshape(w.shape[0], -1)


def encode(w: np.ndarray, kind: T) -> np.ndarray:
    if kind == T.Q4_K:
        return encode_q4_k(w)
    if kind == T.Q6_K:
        return encode_q6_k(w)
    return quants.quantize(w, kind)


def recipe(kind: str, layers: int) -> dict[str, T]:
    """GGUF tensor name -> type for a file of `kind` ("Q4_K_M" or a single type's name)."""
    linears = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
    if kind != Q4_K_M:
        types = {f"blk.{i}.{m}.weight": T[kind] for i in range(layers) for m in linears}
        return types | {"token_embd.weight": T[kind], "output.weight": T[kind]}
    types = {f"blk.{i}.{m}.weight": T.Q4_K for i in range(layers) for m in linears}
    types |= {f"blk.{i}.{m}.weight": T.Q6_K for i in range(0, layers, 2) for m in ("attn_v", "ffn_down")}
    return types | {"token_embd.weight": T.Q4_K, "output.weight": T.Q6_K}


def write_quantized_gguf(hf_dir: Path, dest: Path, types: dict[str, T]) -> Path:
    """A GGUF of the HF model with each tensor of `types` quantized to its type (q/k permuted as llama.cpp does)."""
    write_gguf(hf_dir, dest, raw_types=types)
    reader = GGUFReader(dest)
    sd = load_file(hf_dir / "model.safetensors")
    with open(dest, "r+b") as f:
        for hf_name, info in reader._tensors.items():
            if info.name not in types:
                continue
            w = sd[hf_name].float().numpy()
            if hf_name in reader._permuted:
                w = _permute(w, reader._permuted[hf_name])
            data = np.ascontiguousarray(encode(w, info.ggml_type))
            assert data.nbytes == info.nbytes, (info.name, data.nbytes, info.nbytes)
            f.seek(info.offset)
            f.write(data.tobytes())
    return dest


def quantizing_writer(monkeypatch, kind: T) -> None:
    """Make gguf-py's writer store every layer's 2-D tensor (the linears) quantized to `kind`."""
    import gguf

    add = gguf.GGUFWriter.add_tensor

    def add_tensor(self, name, tensor, raw_shape=None, raw_dtype=None, **kw):
        if name.startswith("blk.") and tensor.ndim == 2 and raw_dtype is None:
            data = encode(np.asarray(tensor, dtype=np.float32), kind)
            return add(self, name, data, raw_shape=data.shape, raw_dtype=kind, **kw)
        return add(self, name, tensor, raw_shape=raw_shape, raw_dtype=raw_dtype, **kw)

    monkeypatch.setattr(gguf.GGUFWriter, "add_tensor", add_tensor)


def logits(engine_dir, prompts) -> torch.Tensor:
    """Float32 logits (tokens, vocab) at every position of each prompt's prefill, concatenated."""
    m, bs, out = load_engine(engine_dir, device="cpu").model, 16, []
    group = m.cfg.num_attention_heads // m.cfg.num_key_value_heads
    for p in prompts:
        n = -(-len(p) // bs)
        batch = make_batch([SeqChunk(p, 0, list(range(n)))], bs, logit_rows=[range(len(p))], gqa_group=group)
        out.append(m.forward(batch, m.new_kv_cache(n, bs)))
    return torch.cat(out)


def top1_agreement(want: torch.Tensor, got: torch.Tensor) -> float:
    return (want.argmax(-1) == got.argmax(-1)).float().mean().item()
