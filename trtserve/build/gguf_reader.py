"""Reads a GGUF file under HF tensor names: streamed metadata (gguf_file.py), each tensor read and
dequantized on its own when the converter asks for it."""

from __future__ import annotations

import re
from pathlib import Path

import gguf
import numpy as np
import torch

from trtserve.build.gguf_blocks import Int4Rows, int4_rows, mxfp4_values
from trtserve.build.gguf_file import GGUFFile, GGUFFormatError, TensorInfo
from trtserve.engine.errors import UserError
from trtserve.engine.hashing import fingerprint
from trtserve.models.family import DecoderFamily
from trtserve.models.layout import EMBED, LM_HEAD
from trtserve.models.registry import family_for_gguf

# Precomputed RoPE factor tables (Llama 3.1 GGUFs): they change the model, and the HF config we
# derive cannot express them.
_UNSUPPORTED = ("rope_freqs.weight",)
# LongRoPE's factors (Phi-3), which llama.cpp writes as tensors: read into the config's rope_parameters
_LONGROPE = {"long_factor": "rope_factors_long.weight", "short_factor": "rope_factors_short.weight"}
# YaRN's HF rope_parameters -> the metadata key (under `{arch}.rope.scaling.`) llama.cpp writes each to
_YARN = {"beta_fast": "yarn_beta_fast", "beta_slow": "yarn_beta_slow", "attention_factor": "yarn_attn_factor"}


def _hf_names(fam: DecoderFamily, layers: int) -> dict[str, str]:
    """GGUF tensor name -> the HF name it is read under, for every tensor a model of the family
    with `layers` layers may hold (biases where its layout has them)."""
    gguf, lay = fam.gguf.names, fam.layout
    out = {}
    modules = [(gguf.module(r), fam.hf.module(r), s) for r, s in lay.model.items()]
    modules += [(gguf.module(r, i), fam.hf.module(r, i), s) for i in range(layers) for r, s in lay.layer.items()]
    for g, hf, src in modules:
        out |= {f"{g}.{x}": f"{hf}.{x}" for x in (("weight", "bias") if src.bias else ("weight",))}
    return out


def _unpermute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's row permutation of q/k (interleaved RoPE pairs -> NeoX halves)."""
    rows = w.shape[0]
    half = rows // heads // 2
    return w.reshape(heads, half, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


class GGUFReader:
    def __init__(self, path: Path):
        self.path = path
        self.description = f"GGUF file {path}"
        self.config_origin = "the GGUF metadata"
        try:
            self._file = GGUFFile(path)
        except (GGUFFormatError, OSError) as err:
            raise UserError(f"{path} is not a readable GGUF file ({err}); re-download or re-convert it") from None
        self._arch = self._meta("general.architecture")
        if not isinstance(self._arch, str):
            raise UserError(f"{path} has no general.architecture key; it is not a model GGUF file")
        if self._arch == "clip":  # llama.cpp's mmproj file: a vision tower and projector (docs/vision.md)
            raise UserError(
                f"{path} is a llama.cpp mmproj (vision) file, which trtserve does not read; build the HF checkpoint"
            )
        self.family = family_for_gguf(self._arch, experts=bool(self._meta(f"{self._arch}.expert_count", 0)))
        hf_names = _hf_names(self.family, int(self._need("block_count")))
        # GGUF weights are dequantized; float32 keeps them exact, bfloat16 MXFP4's (docs/building.md: its cost)
        mxfp4 = any(t.ggml_type == gguf.GGMLQuantizationType.MXFP4 for t in self._file.tensors.values())
        self.auto_dtype = "bfloat16" if mxfp4 else "float32"
        self._tensors: dict[str, TensorInfo] = {}
        for t in self._file.tensors.values():
            if t.name in _LONGROPE.values():
                continue  # config, not weights (_rope)
            if t.name in _UNSUPPORTED:
                raise UserError(
                    f"{path} carries precomputed RoPE factors ({t.name}), which trtserve cannot convert; build from the HF checkpoint instead"
                )
            name = hf_names.get(t.name)
            if name is None and re.fullmatch(r"blk\.\d+\.ffn_(gate|up|down)\.\d+\.weight", t.name):
                raise UserError(
                    f"{path} stores one tensor per expert ({t.name}), an older llama.cpp layout trtserve does not read; "
                    "re-convert the model with a current llama.cpp (merged ffn_*_exps tensors) or build from the HF checkpoint"
                )
            if name is None:
                raise UserError(
                    f"GGUF tensor {t.name} in {path} is not part of a {self.family.name} model; the file does not match its architecture"
                )
            self._tensors[name] = t
        self.hf_config = self._hf_config()
        self._permuted = self._permuted_heads()
        fam, layers = self.family, range(self.hf_config.num_hidden_layers)
        # weight name -> the constant llama.cpp's converter added to it (Gemma's norms), taken off on load
        self._offsets = {
            f"{fam.hf.module(r, i)}.weight": off
            for r, off in fam.gguf.weight_offsets.items()
            for i in (layers if r in fam.hf.layer else [None])
        }

    def _meta(self, key: str, default=None):
        return self._file.metadata.get(key, default)

    def _need(self, key: str):
        value = self._meta(f"{self._arch}.{key}")
        if value is None:
            raise UserError(f"{self.path} lacks the metadata key {self._arch}.{key}; the GGUF file is incomplete")
        return value

    def _permuted_heads(self) -> dict[str, int]:
        """HF weight name -> its head count, for the q/k rows llama.cpp permuted (to be undone)."""
        if not self.family.gguf.permuted_qk:
            return {}
        cfg, hf = self.hf_config, self.family.hf
        heads = {"q_proj": cfg.num_attention_heads, "k_proj": cfg.num_key_value_heads or cfg.num_attention_heads}
        return {f"{hf.module(r, i)}.weight": n for i in range(cfg.num_hidden_layers) for r, n in heads.items()}

    def _hf_config(self):
        """The transformers config, from GGUF metadata.

        Read directly rather than through transformers' GGUF loader, which parses the whole
        vocabulary into Python objects to build a config (hundreds of MB for a 135M model).
        """
        from transformers import AutoConfig

        arch, need = self._arch, self._need
        heads = int(need("attention.head_count"))
        hidden = int(need("embedding_length"))
        head_dim = int(self._meta(f"{arch}.attention.key_length", hidden // heads))
        rope = self._rope(head_dim)
        if self.family.gguf.local_rope_base is not None:  # HF's per-layer-type RoPE (Gemma 3)
            local = {"rope_type": "default", "rope_theta": self.family.gguf.local_rope_base}
            rope = {"full_attention": rope, "sliding_attention": local}
        embed = self.family.hf.module(EMBED) + ".weight"
        if embed not in self._tensors:
            raise UserError(
                f"{self.path} has no {self.family.gguf.names.module(EMBED)}.weight tensor; the GGUF file is incomplete"
            )
        meta = {key: self._meta(f"{arch}.{gkey}") for key, gkey in self.family.gguf.config_keys.items()}
        return AutoConfig.for_model(
            self.family.gguf.model_type or arch,
            architectures=list(self.family.hf_architectures),
            vocab_size=self.shape(embed)[0],
            hidden_size=hidden,
            intermediate_size=int(need("feed_forward_length")),
            num_hidden_layers=int(need("block_count")),
            num_attention_heads=heads,
            num_key_value_heads=int(self._meta(f"{arch}.attention.head_count_kv", heads)),
            head_dim=head_dim,
            max_position_embeddings=int(need("context_length")),
            rms_norm_eps=float(need("attention.layer_norm_rms_epsilon")),
            rope_parameters=rope,
            tie_word_embeddings=self.family.hf.module(LM_HEAD) + ".weight" not in self._tensors,
            bos_token_id=self._meta("tokenizer.ggml.bos_token_id"),
            eos_token_id=self._meta("tokenizer.ggml.eos_token_id"),
            pad_token_id=self._meta("tokenizer.ggml.padding_token_id"),
            **self.family.gguf.config_values,
            **{key: value for key, value in meta.items() if value is not None},  # absent: HF's default
        )

    def _rope(self, head_dim: int) -> dict:
        """HF's rope_parameters from the metadata (and LongRoPE's factor tensors, where the file has them)."""
        arch, need = self._arch, self._need
        rope = {"rope_type": "default", "rope_theta": float(self._meta(f"{arch}.rope.freq_base", 10000.0))}
        dims = int(self._meta(f"{arch}.rope.dimension_count", head_dim))
        if dims != head_dim:  # llama.cpp writes int(head_dim * partial_rotary_factor)
            rope["partial_rotary_factor"] = dims / head_dim
        scaling = self._meta(f"{arch}.rope.scaling.type")
        if scaling not in (None, "none"):
            rope |= {"rope_type": scaling, "factor": float(need("rope.scaling.factor"))}
            if scaling == "yarn":
                rope["original_max_position_embeddings"] = int(need("rope.scaling.original_context_length"))
                yarn = {hf: self._meta(f"{arch}.rope.scaling.{key}") for hf, key in _YARN.items()}
                rope |= {hf: float(v) for hf, v in yarn.items() if v is not None}  # absent: HF's default
            rope |= self.family.gguf.rope_values
        factors = {k: self._file.tensors.get(n) for k, n in _LONGROPE.items()}
        if any(factors.values()):
            if not all(factors.values()):
                raise UserError(f"{self.path} has one of LongRoPE's two factor tensors, not both; re-convert it")
            rope |= {k: self._read_floats(t).tolist() for k, t in factors.items()}
            rope |= {
                "rope_type": "longrope",
                "original_max_position_embeddings": int(need("rope.scaling.original_context_length")),
            }
        return rope

    def _read_floats(self, t: TensorInfo) -> np.ndarray:
        return np.asarray(gguf.quants.dequantize(self._file.read(t), t.ggml_type), dtype=np.float32).reshape(-1)

    def names(self) -> list[str]:
        return sorted(self._tensors)

    def shape(self, name: str) -> tuple[int, ...]:
        # GGUF lists dimensions fastest-first; torch wants them slowest-first.
        return tuple(reversed(self._tensors[name].dims))

    def ggml_type(self, name: str) -> gguf.GGMLQuantizationType:
        """The stored type of the tensor read under HF name `name`."""
        return self._tensors[name].ggml_type

    def tensor_bytes(self) -> dict[str, tuple[str, int]]:
        """GGUF tensor name -> (its stored type's name, its data bytes), for every tensor in the file."""
        return {t.name: (t.ggml_type.name, t.nbytes) for t in self._file.tensors.values()}

    def load_int4(self, name: str) -> Int4Rows:
        """A Q4_0 / Q4_1 / Q4_K tensor's own 4-bit values, scales and zeros, rows as `load` orders them."""
        t = self._tensors[name]
        rows = int4_rows(self._read(t), t.ggml_type, self.shape(name))
        heads = self._permuted.get(name)
        return rows if heads is None else Int4Rows(*(_unpermute(x, heads) for x in (rows.q, rows.scale, rows.zero)))

    def _read(self, t: TensorInfo) -> np.ndarray:
        try:
            return self._file.read(t)
        except GGUFFormatError as err:
            raise UserError(f"{self.path} is not a readable GGUF file ({err}); re-download or re-convert it") from None

    def load(self, name: str) -> torch.Tensor:
        t = self._tensors[name]
        if t.ggml_type == gguf.GGMLQuantizationType.MXFP4:  # bfloat16 holds it exactly at half float32's bytes
            w = mxfp4_values(self._read(t), self.shape(name))
        else:
            w = self._dequantize(t, self.shape(name))
        if name in self._offsets:
            w = w - self._offsets[name]
        return _unpermute(w, self._permuted[name]) if name in self._permuted else w

    def _dequantize(self, t: TensorInfo, shape: tuple[int, ...]) -> torch.Tensor:
        try:
            data = gguf.quants.dequantize(self._read(t), t.ggml_type)
        except NotImplementedError:
            raise UserError(
                f"GGUF tensor {t.name} has type {t.ggml_type.name}, which trtserve cannot read; "
                "re-quantize the file to F32, F16, BF16, Q8_0, Q4_0/Q4_1, Q5_0/Q5_1, MXFP4 or a K-quant"
            ) from None
        # F32 data is a view of the read buffer, the rest a new array: neither is copied again.
        return torch.from_numpy(np.asarray(data, dtype=np.float32)).reshape(shape)

    def save_tokenizer(self, dest: Path) -> None:
        from transformers import AutoTokenizer, PreTrainedTokenizerFast
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

        # AutoTokenizer picks its class from the GGUF's config, which transformers reads only for the
        # architectures it loads; for the rest (smollm3, granite) the same metadata builds a fast tokenizer
        cls = AutoTokenizer if self._arch in GGUF_SUPPORTED_ARCHITECTURES else PreTrainedTokenizerFast
        try:
            tok = cls.from_pretrained(str(self.path.parent), gguf_file=self.path.name)
        except Exception as err:
            raise UserError(
                f"cannot build a tokenizer from {self.path} ({err}); the GGUF has no usable vocabulary"
            ) from None
        tok.save_pretrained(str(dest))

    def fingerprint(self) -> str:
        return fingerprint({self.path.name: self.path})
