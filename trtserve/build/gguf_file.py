"""The GGUF container, streamed: metadata and the tensor table from the header, tensor data by
plain file reads, one tensor at a time.

gguf-py's GGUFReader memory-maps the whole file and turns every metadata field into numpy views,
the vocabulary included (49k tokens and 49k merges for SmolLM2: ~220 MB of Python objects for a
98 MB file), and every mapped page a build touches stays in its resident set. A build needs a
few scalars and the tensor table, so arrays are stepped over, not read, and each tensor is read
into its own buffer that is freed once converted.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
DEFAULT_ALIGNMENT = 32


class GGUFFormatError(ValueError):
    """The file is not a GGUF file this reader understands (the message says where it broke)."""


@dataclass(frozen=True)
class SkippedArray:
    """A metadata array that was stepped over: its element type and length only."""

    value_type: int
    length: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # fastest-varying first, as GGUF lists them
    ggml_type: GGMLQuantizationType
    offset: int  # of its data, from the start of the file
    row_bytes: int  # of one row (dims[0] values), in its stored type
    nbytes: int


class _Stream:
    def __init__(self, f: BinaryIO):
        self.f = f

    def read(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise GGUFFormatError(f"the file ends inside its header (at byte {self.f.tell()})")
        return data

    def scalar(self, fmt: str):
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.read(self.scalar("<Q")).decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        self.f.seek(self.scalar("<Q"), 1)

    def value(self, value_type: int, keep_arrays: bool):
        if value_type in _SCALARS:
            return self.scalar(_SCALARS[value_type])
        if value_type == _STRING:
            return self.string()
        if value_type != _ARRAY:
            raise GGUFFormatError(f"unknown metadata value type {value_type}")
        item_type, length = self.scalar("<I"), self.scalar("<Q")
        if keep_arrays:
            return [self.value(item_type, True) for _ in range(length)]
        if item_type in _SCALARS:
            self.f.seek(length * struct.calcsize(_SCALARS[item_type]), 1)
        elif item_type == _STRING:
            for _ in range(length):
                self.skip_string()
        else:  # arrays of arrays: no model file we read has them, but step over them correctly
            for _ in range(length):
                self.value(item_type, False)
        return SkippedArray(item_type, length)


class GGUFFile:
    """metadata: key -> value (scalars and strings; arrays as SkippedArray unless their key is in
    `keep_arrays`); tensors: name -> TensorInfo."""

    def __init__(self, path: Path, keep_arrays: tuple[str, ...] = ()):
        self.path = path
        self.size = path.stat().st_size
        with open(path, "rb") as f:
            s = _Stream(f)
            if s.read(4) != b"GGUF":
                raise GGUFFormatError("it does not start with the GGUF magic")
            version = s.scalar("<I")
            if version not in (2, 3):
                what = "a big-endian file" if version and not version & 0xFFFF else f"version {version}"
                raise GGUFFormatError(f"it is {what}; only little-endian GGUF versions 2 and 3 are read")
            n_tensors, n_kv = s.scalar("<Q"), s.scalar("<Q")
            self.metadata: dict[str, object] = {}
            for _ in range(n_kv):
                key = s.string()
                self.metadata[key] = s.value(s.scalar("<I"), key in keep_arrays)
            infos = []
            for _ in range(n_tensors):
                name = s.string()
                dims = tuple(s.scalar("<Q") for _ in range(s.scalar("<I")))
                infos.append((name, dims, s.scalar("<I"), s.scalar("<Q")))
            align = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
            if not isinstance(align, int) or align <= 0 or align & (align - 1):
                raise GGUFFormatError(f"general.alignment is {align!r}, not a power of two")
            start = -(-f.tell() // align) * align
        self.tensors: dict[str, TensorInfo] = {}
        for name, dims, type_id, offset in infos:
            if name in self.tensors:
                raise GGUFFormatError(f"tensor {name} is listed twice")
            self.tensors[name] = self._tensor(name, dims, type_id, start + offset)
        # each tensor's bytes follow from its shape and type; ones running into the next mean the two disagree
        ordered = sorted(self.tensors.values(), key=lambda t: t.offset)
        for a, b in itertools.pairwise(ordered):
            if a.offset + a.nbytes > b.offset:
                raise GGUFFormatError(
                    f"tensor {a.name}'s shape {list(reversed(a.dims))} of {a.ggml_type.name} needs {a.nbytes} bytes, "
                    f"which run into tensor {b.name}'s data, so its shape and stored size disagree"
                )

    def _tensor(self, name: str, dims: tuple[int, ...], type_id: int, offset: int) -> TensorInfo:
        try:
            ggml_type = GGMLQuantizationType(type_id)
        except ValueError:
            raise GGUFFormatError(f"tensor {name} has the unknown type number {type_id}") from None
        block, type_size = GGML_QUANT_SIZES[ggml_type]
        if not dims or dims[0] % block:
            raise GGUFFormatError(f"tensor {name} has rows of {dims[:1]} values, not whole {ggml_type.name} blocks")
        row = dims[0] // block * type_size
        nbytes = row * int(np.prod(dims[1:], dtype=np.int64))
        if offset + nbytes > self.size:
            raise GGUFFormatError(f"tensor {name} lies past the end of the file, which is truncated")
        return TensorInfo(name, dims, ggml_type, offset, row, nbytes)

    def read(self, info: TensorInfo) -> np.ndarray:
        """The tensor's stored bytes as (slowest dims..., row_bytes), the shape gguf.quants.dequantize takes."""
        buf = bytearray(info.nbytes)
        with open(self.path, "rb") as f:
            f.seek(info.offset)
            if f.readinto(buf) != info.nbytes:
                raise GGUFFormatError(f"the file changed while tensor {info.name} was read")
        return np.frombuffer(buf, dtype=np.uint8).reshape(*reversed(info.dims[1:]), info.row_bytes)
