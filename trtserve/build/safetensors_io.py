"""Streaming safetensors writer: the header is computed up front, then tensors are produced and
written one at a time, so converting never holds more than one output tensor in memory.

The file is the standard format (8-byte little-endian header length, JSON header padded to 8
bytes, raw little-endian data), readable by `safetensors.safe_open`.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

_ST_DTYPES = {
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.int32: "I32",
    torch.int64: "I64",
    torch.float8_e4m3fn: "F8_E4M3",
}


@dataclass(frozen=True)
class TensorSpec:
    """One output tensor, produced on demand."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    make: Callable[[], torch.Tensor]
    sources: tuple[str, ...] = ()  # source tensor names it is computed from

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * torch.empty((), dtype=self.dtype).element_size()


def write_safetensors(path: Path, specs: Sequence[TensorSpec], on_tensor: Callable[[], None] = lambda: None) -> int:
    """Write `specs` in order; asserts each produced tensor matches its declared shape and dtype.

    Returns the number of data bytes written.
    """
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for s in specs:
        header[s.name] = {
            "dtype": _ST_DTYPES[s.dtype],
            "shape": list(s.shape),
            "data_offsets": [offset, offset + s.nbytes],
        }
        offset += s.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for s in specs:
            t = s.make()
            if tuple(t.shape) != s.shape or t.dtype != s.dtype:
                raise AssertionError(f"{s.name}: produced {tuple(t.shape)} {t.dtype}, declared {s.shape} {s.dtype}")
            f.write(t.contiguous().view(torch.uint8).numpy().tobytes())
            on_tensor()
    return offset
