"""A request checked against its model's configuration before it is queued, with Triton's messages
(core's InferenceRequest::Normalize / ValidateRequestInputs): the inputs present, their datatypes,
their shapes against `dims` (and the implied batch dim), the outputs asked for."""

from __future__ import annotations

import numpy as np

from trtserve.tensor.types import DATATYPES, InferRequest, InvalidInput, TensorModelConfig, TensorSpec

_NAMES = {np.dtype(dtype): name for name, (dtype, _) in DATATYPES.items() if name != "BYTES"}


def datatype_of(array: np.ndarray) -> str:
    """The KServe datatype of an array (object arrays are BYTES); numpy's name when it has none."""
    if array.dtype == np.object_:
        return "BYTES"
    name = _NAMES.get(array.dtype)
    return name if name is not None else str(array.dtype)


def dims_str(dims) -> str:
    return "[" + ",".join(str(int(d)) for d in dims) + "]"


def _names(specs: tuple[TensorSpec, ...]) -> str:
    return ", ".join(repr(t.name) for t in specs)


def check_inputs(config: TensorModelConfig, request: InferRequest) -> int:
    """The request's batch size (1 for a model that does not batch); InvalidInput naming the input or
    output that is wrong otherwise."""
    model = config.name
    for name in request.inputs:
        if config.input(name) is None:
            raise InvalidInput(
                f"unexpected inference input '{name}' for model '{model}'; its inputs are {_names(config.inputs)}"
            )
    missing = [t.name for t in config.inputs if not t.optional and t.name not in request.inputs]
    if missing:
        raise InvalidInput(
            f"expected {len(config.inputs)} inputs but got {len(request.inputs)} inputs for model '{model}'; "
            f"missing required input(s) {', '.join(repr(m) for m in missing)}"
        )
    for name in request.outputs or ():
        if config.output(name) is None:
            raise InvalidInput(
                f"unexpected inference output '{name}' for model '{model}'; its outputs are {_names(config.outputs)}"
            )

    batched = config.max_batch_size > 0
    batch = 0
    for name, array in request.inputs.items():
        if batched:
            if array.ndim == 0:
                raise InvalidInput(f"input '{name}' has no shape but model requires batch dimension for '{model}'")
            if batch == 0:
                batch = array.shape[0]
            elif array.shape[0] != batch:
                raise InvalidInput(f"input '{name}' batch size does not match other inputs for '{model}'")
    for name, array in request.inputs.items():
        spec = config.input(name)
        got = datatype_of(array)
        if got != spec.datatype:
            raise InvalidInput(
                f"inference input '{name}' data-type is '{got}', but model '{model}' expects '{spec.datatype}'"
            )
        shape = array.shape[1:] if batched else array.shape
        if len(shape) != len(spec.dims) or any(d != -1 and d != s for d, s in zip(spec.dims, shape, strict=True)):
            expected = ((-1,) if batched else ()) + tuple(spec.dims)
            forgot = batched and len(array.shape) == len(spec.dims)
            raise InvalidInput(
                f"unexpected shape for input '{name}' for model '{model}'. "
                f"Expected {dims_str(expected)}, got {dims_str(array.shape)}"
                + (" (the model batches: prepend a batch dim)" if forgot else "")
            )
    if batched and not 1 <= batch <= config.max_batch_size:
        raise InvalidInput(
            f"inference request batch-size must be <= {config.max_batch_size} for '{model}' (got {batch}); "
            "send at most max_batch_size rows per request"
            if batch
            else f"inference request batch-size must be at least 1 for '{model}' (got a batch of 0)"
        )

    return batch if batched else 1


def batch_key(config: TensorModelConfig, request: InferRequest) -> tuple:
    """Requests share a batch only when this is equal: the inputs present and their non-batch shapes
    (Triton enforces equal shapes for inputs with variable dims and compares optional inputs)."""
    skip = 1 if config.max_batch_size > 0 else 0
    return tuple(sorted((name, a.shape[skip:]) for name, a in request.inputs.items()))
