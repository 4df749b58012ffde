"""Triton's classification extension: an output asked for with `"parameters": {"classification": k}`
comes back as BYTES, the top k of each batch row as "value:index" or "value:index:label" (server
src/classification.cc: the value printed as C++'s std::to_string does, labels from label_filename)."""

from __future__ import annotations

import numpy as np

from trtserve.tensor.types import InvalidInput
from trtserve.tensor.validate import datatype_of

# Triton classifies these datatypes only (FP16, BOOL and BYTES are refused).
CLASSIFIABLE = ("UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP32", "FP64")


def _value(v) -> str:
    """std::to_string: "%f" for floating point, the plain integer otherwise."""
    return f"{float(v):f}" if isinstance(v, np.floating) else str(int(v))


def classify(array: np.ndarray, k: int, labels: tuple[str, ...] | None = None, batched: bool = True) -> np.ndarray:
    """Top-k classes of each batch row (of the whole tensor when the model does not batch), highest
    value first, ties by lower index: an object array of bytes, shape (batch, min(k, row)) or
    (min(k, elements),)."""
    datatype = datatype_of(array)
    if datatype not in CLASSIFIABLE:
        raise InvalidInput(f"class result not available for output due to unsupported type '{datatype}'")
    if k < 1:
        raise InvalidInput(f"classification count must be at least 1, got {k}")
    rows = array.reshape(len(array), -1) if batched and array.ndim > 0 else array.reshape(1, -1)
    count = min(k, rows.shape[1])
    out = np.empty((rows.shape[0], count), dtype=np.object_)
    for b, row in enumerate(rows):
        order = np.argsort(-row.astype(np.float64), kind="stable")[:count]
        for j, i in enumerate(order):
            text = f"{_value(row[i])}:{i}"
            if labels and i < len(labels) and labels[i]:  # Triton: no label, no suffix
                text += f":{labels[i]}"
            out[b, j] = text.encode()
    return out if batched and array.ndim > 0 else out[0]
