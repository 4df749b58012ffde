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
            f.write(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())  # reshape: 0-d scalars
            on_tensor()
    return offset


_TORCH_FROM_ST = {v: k for k, v in _ST_DTYPES.items()}


class SafetensorsFile:
    """Reads tensors with plain file reads, one at a time.

    safetensors' own reader memory-maps the file, and every page it touches stays in the
    process's resident set until the map closes, so converting a 4 GB checkpoint would peak at
    4 GB. Reading each tensor into its own buffer keeps the peak at the largest tensor.
    """

    def __init__(self, path: Path):
        self.path = path
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ValueError("file shorter than its 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise ValueError(f"header length {n} exceeds the file size {size}")
            try:
                header = json.loads(f.read(n))
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise ValueError(f"header is not valid JSON ({err})") from None
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
        header.pop("__metadata__", None)
        self._base = 8 + n
        self._entries: dict[str, tuple[torch.dtype, tuple[int, ...], int, int]] = {}
        for name, e in header.items():
            try:
                dtype = _TORCH_FROM_ST[e["dtype"]]
                start, end = e["data_offsets"]
                shape = tuple(int(d) for d in e["shape"])
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"header entry for {name} is malformed") from None
            expected = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
            if end - start != expected or start < 0:
                raise ValueError(f"tensor {name} has inconsistent offsets")
            if self._base + end > size:
                raise ValueError(f"tensor {name} lies past the end of the file (the file is truncated)")
            self._entries[name] = (dtype, shape, start, end)

    def keys(self) -> list[str]:
        return list(self._entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._entries[name][1]

    def load(self, name: str) -> torch.Tensor:
        dtype, shape, start, end = self._entries[name]
        buf = bytearray(end - start)
        with open(self.path, "rb") as f:
            f.seek(self._base + start)
            if f.readinto(buf) != len(buf):
                raise ValueError(f"short read of {name}")
        if not buf:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(buf, dtype=dtype).reshape(shape)
