"""The KServe v2 infer call, shared by HTTP (`/v2/models/{m}/infer`) and gRPC (ModelInfer,
ModelStreamInfer): decoded input tensors and request parameters in, checked generate inputs out.

Triton reserves some request parameters; tritonclient sets them from keyword arguments:
    timeout                                   int, microseconds: this request's own deadline
    priority                                  int level: 1 is the highest, 0 the default
    sequence_id, sequence_start, sequence_end sequence batching (stateful models): refused here
    binary_data_output, headers, triton_*     transport details, read (or ignored) by the transport
Every other parameter is read like an input tensor of that name (max_tokens, temperature, ...).

A model that takes images also has an image tensor beside text_input (docs/vision.md): BYTES, one image per
element, shape [images] for one prompt or [prompts, images] for a batch; `text_input` writes one placeholder
per image. TensorRT-LLM's ensemble names `image_url_input` (URLs) alike; its `image_bytes_input` holds decoded
UINT8 pixels, ours the encoded file (PNG, JPEG or WebP), which the server decodes within its image limits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from trtserve.serve.errors import APIError
from trtserve.serve.images import ImageSource
from trtserve.serve.kserve.protocol import DTYPES, GenerateInputs, generate_inputs

OUTPUTS = {"text_output": "BYTES", "cum_log_probs": "FP32", "output_log_probs": "FP32"}
# The model's metadata (GET /v2/models/{m}): the TensorRT-LLM ensemble's optional inputs and datatypes.
OPTIONAL_INPUTS = {
    "max_tokens": "INT32",
    "temperature": "FP32",
    "top_k": "INT32",
    "top_p": "FP32",
    "min_p": "FP32",
    "min_tokens": "INT32",
    "presence_penalty": "FP32",
    "frequency_penalty": "FP32",
    "repetition_penalty": "FP32",
    "length_penalty": "FP32",
    "seed": "UINT64",
    "beam_width": "INT32",
    "num_return_sequences": "INT32",
    "stop_words": "BYTES",
    "bad_words": "BYTES",
    "end_id": "INT32",
    "pad_id": "INT32",
    "stream": "BOOL",
    "exclude_input_in_output": "BOOL",
    "return_log_probs": "BOOL",
}
# A vision model's image tensors (BYTES): an element -> its image; a request sends one of them
IMAGE_INPUTS: dict[str, Callable[[bytes], ImageSource]] = {
    "image_bytes_input": lambda b: ImageSource(data=b),
    "image_url_input": lambda b: ImageSource(url=b.decode("utf-8", "replace")),
}
_NAMES = {np.dtype(t): name for name, t in DTYPES.items()}  # an array's dtype -> its KServe datatype
TRANSPORT_PARAMETERS = ("binary_data_output", "headers")


@dataclass
class InferCall:
    prompts: list[str]  # text_input's elements, flattened (row-major)
    shape: list[int]  # text_input's shape; every output has it, plus [n] when num_return_sequences > 1
    inputs: GenerateInputs
    outputs: list[str]  # the outputs to return, in order
    timeout: float | None  # seconds: the request's own deadline, if it set one
    priority: float  # engine priority: higher is served first
    images: list[list[ImageSource]]  # per prompt, in placeholder order; [] for text only

    @property
    def output_shape(self) -> list[int]:
        n = self.inputs.num_return_sequences
        return self.shape + ([n] if n > 1 else [])


def _timeout(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise APIError(400, f"parameter 'timeout' is {value!r}; give a positive number of microseconds")
    return value / 1e6


def _priority(value: Any) -> float:
    if isinstance(value, float) and value.is_integer():  # JSON's 3.0 is the integer 3
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise APIError(
            400, f"parameter 'priority' is {value!r}; give a priority level (1 is the highest, 0 the default)"
        )
    # Triton: level 1 is served first and 0 means the default; ours: higher first, 0 the default.
    return 0.0 if value == 0 else 1.0 / value


def _split_parameters(parameters: dict[str, Any]) -> tuple[dict[str, Any], float | None, float | None]:
    """-> (generate values, timeout s, priority); refuses sequence batching."""
    values, timeout, priority = {}, None, None
    for key, value in parameters.items():
        if key in ("sequence_id", "sequence_start", "sequence_end"):
            raise APIError(
                400, f"parameter {key!r}: sequence batching is not supported; send each request without a sequence"
            )
        if key == "timeout":
            timeout = _timeout(value)
        elif key == "priority":
            priority = _priority(value)
        elif key not in TRANSPORT_PARAMETERS and not key.startswith("triton_"):
            values[key] = value
    return values, timeout, priority


def check_datatypes(tensors: dict[str, np.ndarray], model: str) -> None:
    """Each input the model's metadata declares must have its datatype, as Triton requires (a FP64
    text_input was stringified and generated from)."""
    for name, arr in tensors.items():
        want = "BYTES" if name == "text_input" or name in IMAGE_INPUTS else OPTIONAL_INPUTS.get(name)
        got = _NAMES.get(arr.dtype)
        if want is not None and got != want:
            raise APIError(400, f"inference input '{name}' data-type is '{got}', but model '{model}' expects '{want}'")


def _image_sources(tensors: dict[str, np.ndarray], num_prompts: int) -> list[list[ImageSource]]:
    """Pops the image tensor (if any) and splits its elements evenly over the prompts, row-major."""
    given = [name for name in IMAGE_INPUTS if name in tensors]
    if len(given) > 1:
        raise APIError(400, f"send images in one input, {' or '.join(given)}, not both")
    if not given:
        return []
    name = given[0]
    arr = tensors.pop(name)
    if arr.size % num_prompts:
        raise APIError(
            400,
            f"input {name!r} has {arr.size} images for {num_prompts} prompts; give it shape [images] for one "
            "prompt, or [prompts, images] with the same number of images for each",
        )
    return [[IMAGE_INPUTS[name](x) for x in row] for row in arr.reshape(num_prompts, -1)]


def infer_call(
    tensors: dict[str, np.ndarray], parameters: dict[str, Any], outputs: list[str] | None, model: str
) -> InferCall:
    """Check one infer request to `model`: `tensors` by input name, `parameters` as plain values,
    `outputs` the names the client asked for (None: text_output, and the log probs when return_log_probs)."""
    tensors = dict(tensors)
    if "text_input" not in tensors:
        raise APIError(400, "input 'text_input' (BYTES) is required")
    check_datatypes(tensors, model)
    text = tensors.pop("text_input")
    try:  # strict: invalid UTF-8 was read as U+FFFD and generated from (found by tests/fuzz)
        prompts = [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in text.reshape(-1)]
    except UnicodeDecodeError as err:
        raise APIError(400, f"input 'text_input' is not valid UTF-8 ({err.reason} at byte {err.start})") from None
    if not prompts:
        raise APIError(400, "input 'text_input' has no elements; send at least one prompt")
    if not all(prompts):
        raise APIError(400, "input 'text_input' has an empty string; every prompt needs text")
    images = _image_sources(tensors, len(prompts))
    values, timeout, priority = _split_parameters(parameters)
    values.update(tensors)
    g = generate_inputs(values)
    wanted = outputs or ["text_output"] + (["cum_log_probs", "output_log_probs"] if g.return_log_probs else [])
    for name in wanted:
        if name not in OUTPUTS:
            raise APIError(400, f"unknown output {name!r}; this model has {', '.join(OUTPUTS)}")
    return InferCall(
        prompts,
        list(text.shape),
        g,
        wanted,
        g.timeout if timeout is None else timeout,
        g.priority if priority is None else priority,
        images,
    )
