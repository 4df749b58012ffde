"""The inputs `trtserve bench` sends a tensor model: concrete shapes from the model's KServe metadata,
and seeded random data for every datatype (or the user's own files).

A shape's -1 is the batch dim when it comes first and the model batches (config max_batch_size > 0):
it becomes 1. Any other -1 needs `--shape NAME=D1xD2...` (the full shape, batch dim included).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trtserve.engine.errors import UserError

BYTES_LEN = 16  # bytes in each random BYTES element: lowercase ASCII letters, so text models take them too
INT_HIGH = 8  # random integers are drawn from [0, INT_HIGH): small enough to index any table or class


@dataclass(frozen=True)
class InputPlan:
    """One input, as the bench sends it."""

    name: str
    datatype: str  # KServe datatype ("FP32", "BYTES", ...)
    shape: tuple[int, ...]  # concrete: batch dim (when the model batches) included
    data: np.ndarray | None = None  # the user's own array (--input); None: random per request


def is_tensor_model(metadata: dict) -> bool:
    """An LLM's metadata (trtserve's, or Triton's TensorRT-LLM ensemble) takes `text_input` and gives
    `text_output`; any other model is benched as a tensor model."""
    inputs = {t.get("name") for t in metadata.get("inputs", [])}
    outputs = {t.get("name") for t in metadata.get("outputs", [])}
    return not ("text_input" in inputs and "text_output" in outputs)


def parse_shapes(items: tuple[str, ...] | list[str]) -> dict[str, tuple[int, ...]]:
    """`("x=1x3x224x224", "mask=1x128")` -> {"x": (1, 3, 224, 224), "mask": (1, 128)}."""
    out: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, _, dims = item.partition("=")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            shape = ()
        if not name.strip() or not shape or min(shape) < 0:
            raise UserError(f"--shape {item!r} is not valid; write NAME=D1xD2... with non-negative dims, e.g. x=1x256")
        out[name.strip()] = shape
    return out


def parse_input_files(items: tuple[str, ...] | list[str]) -> dict[str, Path]:
    """`("image=cat.png",)` -> {"image": Path("cat.png")}, each file existing."""
    out: dict[str, Path] = {}
    for item in items:
        name, _, path = item.partition("=")
        if not name.strip() or not path or not Path(path).is_file():
            raise UserError(f"--input {item!r} is not valid; write NAME=FILE with FILE an existing .npy or data file")
        out[name.strip()] = Path(path)
    return out


def _numpy_dtype(datatype: str):
    from tritonclient.utils import triton_to_np_dtype

    dtype = triton_to_np_dtype(datatype)
    if dtype is None:
        raise UserError(f"the model has an input of datatype {datatype!r}, which the bench cannot make data for")
    return dtype


def _shape(spec: dict, batched: bool, given: tuple[int, ...] | None) -> tuple[int, ...]:
    dims = [int(d) for d in spec.get("shape", [])]
    name = spec["name"]
    if given is not None:
        fixed = all(d == -1 or d == g for d, g in zip(dims, given, strict=False))
        if len(given) != len(dims) or not fixed:
            raise UserError(
                f"--shape {name}={'x'.join(map(str, given))} does not fit input {name!r} of shape {dims}; "
                "give every dim, keeping the fixed ones"
            )
        return given
    shape = [1 if (i == 0 and batched and d == -1) else d for i, d in enumerate(dims)]
    if -1 in shape:
        example = "x".join("D" if d == -1 else str(d) for d in shape)
        raise UserError(f"input {name!r} has shape {dims} with a variable dim; give it with --shape {name}={example}")
    return tuple(shape)


def _load(name: str, datatype: str, shape: tuple[int, ...], path: Path) -> np.ndarray:
    """A .npy file is the tensor as is; any other file is one BYTES element, repeated to the shape."""
    if path.suffix == ".npy":
        try:
            data = np.load(path, allow_pickle=False)
        except ValueError as err:
            raise UserError(f"--input {name}={path} is not a readable .npy array ({err})") from None
        if datatype == "BYTES" and data.dtype.kind in "SU":
            return np.vectorize(lambda v: v if isinstance(v, bytes) else str(v).encode(), otypes=[object])(data)
        if data.dtype != np.dtype(_numpy_dtype(datatype)):
            raise UserError(f"--input {name}={path} holds {data.dtype}; input {name!r} is {datatype}")
        return data
    if datatype != "BYTES":
        raise UserError(f"--input {name}={path}: input {name!r} is {datatype}, so give a .npy array of that type")
    out = np.empty(shape, dtype=np.object_)
    out.fill(path.read_bytes())
    return out


def plan_inputs(
    metadata: dict,
    max_batch_size: int,
    shapes: dict[str, tuple[int, ...]] | None = None,
    files: dict[str, Path] | None = None,
) -> list[InputPlan]:
    """Every input of `metadata` (GET /v2/models/M) with a concrete shape; UserError naming a --shape
    or --input that matches no input, or an input whose shape cannot be chosen."""
    shapes, files = dict(shapes or {}), dict(files or {})
    names = [t["name"] for t in metadata.get("inputs", [])]
    if unknown := (set(shapes) | set(files)) - set(names):
        raise UserError(
            f"model {metadata.get('name', '')!r} has no input {sorted(unknown)[0]!r}; its inputs are {', '.join(names)}"
        )
    plans = []
    for spec in metadata.get("inputs", []):
        name, datatype = spec["name"], spec["datatype"]
        _numpy_dtype(datatype)
        if name in files:
            given = shapes.get(name)
            data = _load(name, datatype, given or _shape(spec, max_batch_size > 0, None), files[name])
            plans.append(InputPlan(name, datatype, tuple(data.shape), data))
            continue
        plans.append(InputPlan(name, datatype, _shape(spec, max_batch_size > 0, shapes.get(name))))
    return plans


def random_tensor(datatype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Seeded data of `datatype`: normal floats, integers in [0, INT_HIGH), random bools, random ASCII words."""
    dtype = np.dtype(_numpy_dtype(datatype))
    if datatype == "BYTES":
        letters = rng.integers(ord("a"), ord("z") + 1, size=(int(np.prod(shape)), BYTES_LEN), dtype=np.uint8)
        return np.array([row.tobytes() for row in letters] or [], dtype=np.object_).reshape(shape)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind in "iu":
        return rng.integers(0, INT_HIGH, size=shape).astype(dtype)
    return rng.standard_normal(size=shape).astype(dtype)


def input_sets(plans: list[InputPlan], count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """`count` different request inputs (cycled over by the requests), seeded."""
    rng = np.random.default_rng(seed)
    return [
        {p.name: p.data if p.data is not None else random_tensor(p.datatype, p.shape, rng) for p in plans}
        for _ in range(count)
    ]


def batch_elements(plans: list[InputPlan], max_batch_size: int) -> int:
    """Inferences one request carries: its batch dim when the model batches, else 1."""
    if max_batch_size <= 0 or not plans:
        return 1
    return int(plans[0].shape[0]) if plans[0].shape else 1
