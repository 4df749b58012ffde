"""Source tensors a checkpoint keeps inside others (`DecoderFamily.hf_stored`: gpt-oss's experts, gate and
up interleaved in one (experts, in, out) tensor), read under the family's own names; where config.json's
`quantization_config.quant_method` is `mxfp4`, a stored tensor may be MXFP4 (`{tensor}_blocks`, uint8
(..., out, in / 32, 16): two 4-bit E2M1 values a byte, low nibble first; `{tensor}_scales`, uint8
(..., out, in / 32): a power of two biased by 127 per 32 values), dequantized exactly as transformers'
`integrations/mxfp4.py` does, to bfloat16 (every MXFP4 value is one there) before any cast.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import torch

from trtserve.engine.errors import UserError
from trtserve.models.family import DecoderFamily, Stored

MXFP4 = "mxfp4"
BLOCK_BYTES = 16  # the 32 values of an MXFP4 block, two a byte: the only block size OCP's MX spec defines
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def dequantize_mxfp4(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(..., out, in) bfloat16 from MXFP4 blocks (..., out, in / 32, 16) and scales (..., out, in / 32)."""
    if blocks.dim() > 3:  # one expert at a time: the index and float32 temporaries stay one expert's size
        return torch.stack([dequantize_mxfp4(b, s) for b, s in zip(blocks, scales, strict=True)])
    lut = torch.tensor(E2M1)
    values = torch.stack([lut[(blocks & 0x0F).int()], lut[(blocks >> 4).int()]], dim=-1)  # (out, G, 16, 2)
    values = torch.ldexp(values.flatten(-2), scales.to(torch.int32)[..., None] - 127)  # (out, G, 32), exact
    return values.flatten(-2).to(torch.bfloat16)


class StoredTensors:
    """A checkpoint's tensor names (`names`, read by `shape` / `load`) with the family's stored tensors under
    the family's names; quant_method: config.json's `quantization_config.quant_method` (None: none)."""

    def __init__(
        self,
        family: DecoderFamily,
        names: Iterable[str],
        shape: Callable[[str], tuple[int, ...]],
        load: Callable[[str], torch.Tensor],
        quant_method: str | None,
    ):
        self._shape, self._load = shape, load
        if family.hf_stored and quant_method not in (None, MXFP4):
            raise UserError(
                f"quantization_config.quant_method {quant_method!r} is not read for {family.name} checkpoints; "
                f"trtserve reads them unquantized or as {MXFP4}"
            )
        self._all = set(names)
        self._mxfp4 = quant_method == MXFP4
        self._stored: dict[str, tuple[Stored, str]] = {}  # our name -> (its spec, the stored tensor's full name)
        used: set[str] = set()
        layer = re.compile(re.escape(family.hf.layer_prefix).replace(r"\{i\}", r"(\d+)"))
        for i in sorted({int(m[1]) for n in self._all if (m := layer.match(n))}):
            prefix = family.hf.layer_prefix.format(i=i)
            for ours, spec in family.hf_stored.items():
                parts = self._parts(prefix + spec.tensor)
                if all(p in self._all for p in parts):
                    self._stored[prefix + ours] = (spec, prefix + spec.tensor)
                    used.update(parts)
        self._names = sorted((self._all - used) | self._stored.keys())

    def _parts(self, full: str) -> tuple[str, ...]:
        """The checkpoint tensors one stored tensor is read from: MXFP4 blocks and scales, or itself."""
        return (full + "_blocks", full + "_scales") if self._mxfp4 and full + "_blocks" in self._all else (full,)

    def names(self) -> list[str]:
        return self._names

    def shape(self, name: str) -> tuple[int, ...]:
        if name not in self._stored:
            return self._shape(name)
        spec, full = self._stored[name]
        dims = list(self._stored_shape(full))
        dims[-1] = len(range(spec.start, dims[-1], spec.step))
        return (*dims[:-2], dims[-1], dims[-2]) if spec.transposed else tuple(dims)

    def load(self, name: str) -> torch.Tensor:
        if name not in self._stored:
            return self._load(name)
        spec, full = self._stored[name]
        t = self._read(full)[..., spec.start :: spec.step]
        return t.transpose(-1, -2).contiguous() if spec.transposed else t.contiguous()

    def _stored_shape(self, full: str) -> tuple[int, ...]:
        """The stored tensor's shape as HF's model holds it (MXFP4: (..., in, out) once dequantized)."""
        if len(parts := self._parts(full)) == 1:
            return self._shape(full)
        *lead, out, groups, nbytes = self._check_mxfp4(*parts)
        return (*lead, groups * nbytes * 2, out)

    def _read(self, full: str) -> torch.Tensor:
        if len(parts := self._parts(full)) == 1:
            return self._load(full)
        self._check_mxfp4(*parts)
        return dequantize_mxfp4(self._load(parts[0]), self._load(parts[1])).transpose(-1, -2)  # HF's (..., in, out)

    def _check_mxfp4(self, blocks: str, scales: str) -> tuple[int, ...]:
        """The blocks' shape; a UserError names a block size or scales shape trtserve does not read."""
        shape, scale_shape = self._shape(blocks), self._shape(scales)
        if len(shape) < 3 or shape[-1] != BLOCK_BYTES:
            per = f"{shape[-1] * 2} values" if shape else "no blocks"
            raise UserError(
                f"MXFP4 tensor {blocks} has blocks of {per}; trtserve reads MXFP4 blocks of 32 values "
                f"({BLOCK_BYTES} bytes) only"
            )
        if scale_shape != shape[:-1]:
            raise UserError(
                f"MXFP4 scales {scales} have shape {list(scale_shape)} but its blocks imply {list(shape[:-1])}; "
                "the checkpoint is corrupted"
            )
        return shape
