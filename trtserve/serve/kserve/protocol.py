"""KServe v2 / Triton bodies: infer requests (JSON and the binary tensor extension) and the
TensorRT-LLM ensemble's generate inputs."""

from __future__ import annotations

import json
import struct
from typing import Any, Literal

import numpy as np
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from trtserve.engine.sampling import GuidedDecoding, SamplingParams
from trtserve.serve.config import MAX_CLIENT_ID
from trtserve.serve.errors import APIError
from trtserve.serve.json_body import JsonBody
from trtserve.serve.request_fields import RequestOptionFields
from trtserve.serve.unicode import check_unicode
from trtserve.tensor.types import DATATYPES

DTYPES = {name: dtype for name, (dtype, _) in DATATYPES.items()}  # KServe datatype -> numpy dtype
HEADER = "Inference-Header-Content-Length"


class InferInput(JsonBody):
    model_config = ConfigDict(extra="forbid")
    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Any] | None = None
    data: list[Any] | None = None


class InferOutputSpec(JsonBody):
    model_config = ConfigDict(extra="forbid")
    name: str
    parameters: dict[str, Any] | None = None


class InferRequest(JsonBody):
    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(None, max_length=MAX_CLIENT_ID)  # the client's; echoed back, never a key
    # The KServe SDK repeats the model (and version) in the body; the URL decides, as in Triton.
    model_name: str | None = Field(None, description="Ignored: the URL names the model.")
    model_version: str | None = Field(None, description="Ignored: the URL names the version.")
    parameters: dict[str, Any] | None = None
    inputs: list[InferInput] = Field(min_length=1)
    outputs: list[InferOutputSpec] | None = None


def _bytes_elements(buf: bytes) -> list[bytes]:
    out, i = [], 0
    while i < len(buf):
        if i + 4 > len(buf):
            raise ValueError("truncated BYTES length prefix")
        (n,) = struct.unpack_from("<I", buf, i)
        if i + 4 + n > len(buf):
            raise ValueError("BYTES element runs past its buffer")
        out.append(buf[i + 4 : i + 4 + n])
        i += 4 + n
    return out


def encode_bytes(values: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(v)) + v for v in values)


def decode_tensor(inp: InferInput, raw: bytes | None) -> np.ndarray:
    """One input as an array of its shape; `raw` is its little-endian bytes (BYTES: length-prefixed)."""
    if inp.datatype not in DTYPES:
        raise APIError(400, f"input {inp.name!r} has datatype {inp.datatype!r}; use one of {', '.join(DTYPES)}")
    count = int(np.prod(inp.shape)) if inp.shape else 1
    if any(d < 0 for d in inp.shape):
        raise APIError(400, f"input {inp.name!r} has a negative dimension in shape {inp.shape}")
    try:
        if raw is not None:
            if inp.datatype == "BYTES":
                arr = np.array(_bytes_elements(raw), dtype=np.object_)
            else:
                arr = np.frombuffer(raw, dtype=np.dtype(DTYPES[inp.datatype]).newbyteorder("<"))
        else:
            if inp.data is None:
                raise ValueError("it has neither data nor binary_data_size")
            flat = list(_flatten(inp.data))
            if inp.datatype == "BYTES":
                arr = np.array([_bytes_element(v) for v in flat], dtype=np.object_)
            else:
                arr = np.array(flat, dtype=DTYPES[inp.datatype])
    except (ValueError, TypeError, OverflowError) as err:
        raise APIError(400, f"input {inp.name!r} cannot be read as {inp.datatype}: {err}") from None
    if arr.size != count:
        raise APIError(400, f"input {inp.name!r} has {arr.size} elements but shape {inp.shape} needs {count}")
    return arr.reshape(inp.shape) if inp.shape else arr.reshape(())


def _bytes_element(v) -> bytes:
    """A BYTES element: a string in JSON (bytes from gRPC). A number was bytes(n), n zero bytes:
    1e9 allocated a GB (tests/fuzz)."""
    if isinstance(v, bytes):
        return v
    if not isinstance(v, str):
        raise ValueError(f"BYTES elements in JSON are strings, not {type(v).__name__}")
    return v.encode()


def _flatten(data):
    """Depth-first, without recursion: a client's nesting can be deeper than Python's stack."""
    stack = [iter(data)]
    while stack:
        for v in stack[-1]:
            if isinstance(v, list):
                stack.append(iter(v))
                break
            yield v
        else:
            stack.pop()


def parse_infer(body: bytes, header_length: str | None) -> tuple[InferRequest, dict[str, np.ndarray]]:
    """Parse an infer body: JSON, or a JSON header followed by binary tensors (binary_data_size)."""
    try:
        split = int(header_length) if header_length is not None else len(body)
        if not 0 < split <= len(body):
            raise ValueError
    except ValueError:
        raise APIError(400, f"{HEADER} must be an integer between 1 and the body size ({len(body)})") from None
    try:
        header = json.loads(body[:split])
        check_unicode(header, body[:split])
        req = InferRequest.model_validate(header)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise APIError(400, "the infer request header is not valid JSON") from None
    except RecursionError:  # tests/fuzz: a deeply nested header was a 500
        raise APIError(400, "the infer request header is nested too deeply") from None
    except ValidationError as err:
        e = err.errors()[0]
        field = ".".join(str(x) for x in e["loc"])
        msg = "unknown field" if e["type"] == "extra_forbidden" else e["msg"]
        raise APIError(400, f"{field}: {msg}") from None
    except ValueError as err:  # check_unicode
        raise APIError(400, str(err)) from None
    blob, offset, tensors = body[split:], 0, {}
    for inp in req.inputs:
        size = (inp.parameters or {}).get("binary_data_size")
        raw = None
        if size is not None:
            if not isinstance(size, int) or size < 0 or offset + size > len(blob):
                raise APIError(
                    400, f"input {inp.name!r} declares binary_data_size {size} beyond the {len(blob)} binary bytes sent"
                )
            raw, offset = blob[offset : offset + size], offset + size
        if inp.name in tensors:
            raise APIError(400, f"input {inp.name!r} is given twice")
        tensors[inp.name] = decode_tensor(inp, raw)
    if offset != len(blob):
        raise APIError(400, f"{len(blob) - offset} binary bytes follow the last input; check binary_data_size")
    return req, tensors


def scalar(v):
    """Triton sends scalars as 1-element tensors or lists; take the value."""
    while isinstance(v, list | tuple) and len(v) == 1:
        v = v[0]
    if isinstance(v, np.ndarray):
        v = v.reshape(-1)
        v = v[0].item() if v.size == 1 else v.tolist()
    if isinstance(v, bytes):
        v = v.decode()
    return v


class GenerateInputs(RequestOptionFields):
    """The TensorRT-LLM ensemble's optional inputs (besides text_input), as tensors, keys or parameters."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int = Field(16, ge=1, lt=2**31)  # int32 bounds: a larger int was a 500 (tests/fuzz)
    temperature: float | None = Field(None, ge=0.0, le=100.0)
    top_k: int | None = Field(None, ge=0, lt=2**31)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    min_tokens: int | None = Field(None, ge=0, lt=2**31)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=10.0)
    # beam search only; accepted and unused, as TensorRT-LLM does without beams
    length_penalty: float | None = Field(None, allow_inf_nan=False)
    seed: int | None = Field(None, ge=0, le=2**64 - 1)
    random_seed: int | None = Field(None, ge=0, le=2**64 - 1)
    beam_width: int = Field(1, ge=1, le=1)
    num_return_sequences: int = Field(1, ge=1, le=16)
    stop_words: list[str] = []
    bad_words: list[str] = []
    end_id: int | None = Field(None, ge=-1, lt=2**31)  # -1: no end token
    pad_id: int | None = Field(None, ge=-1, lt=2**31)
    stream: bool = False
    exclude_input_in_output: bool = False
    return_log_probs: bool = False
    return_context_logits: bool = Field(False, le=False)
    return_generation_logits: bool = Field(False, le=False)
    timeout: float | None = Field(None, gt=0.0)
    # trtserve extension (parameters): adds the request's acceptance counts (`spec_decode`) to the
    # response and the last streamed event; priority, the prefix-cache fields and `speculate` come
    # from RequestOptionFields (serve/request_fields.py)
    return_spec_decode_stats: bool = False

    # guided decoding, as TensorRT-LLM's Triton backend names it (guided_decoding_guide_type / _guide)
    guided_decoding_guide_type: Literal["json", "json_schema", "regex", "ebnf_grammar"] | None = None
    guided_decoding_guide: str | None = None

    def guided(self) -> GuidedDecoding | None:
        """The grammar the output must follow ("json": any JSON object)."""
        kind, guide = self.guided_decoding_guide_type, self.guided_decoding_guide
        if kind is None:
            if guide is not None:
                raise APIError(400, "guided_decoding_guide needs guided_decoding_guide_type (json_schema, regex, ...)")
            return None
        if kind == "json":
            return GuidedDecoding(kind="json_object")
        if not guide:
            raise APIError(400, f"guided_decoding_guide_type {kind} needs a guided_decoding_guide")
        return GuidedDecoding(kind={"ebnf_grammar": "grammar"}.get(kind, kind), spec=guide)

    def sampling_params(self, bad_words_ids: list[list[int]]) -> SamplingParams:
        """The engine's params, built without validating again: these inputs were validated when they
        were read, within bounds SamplingParams accepts (tests/unit/test_sampling_bounds.py checks
        that). bad_words_ids: `bad_words` tokenized."""
        # TensorRT-LLM samples only when top_k or top_p is set; otherwise it decodes greedily.
        top_k, top_p = self.top_k or 0, self.top_p or 0.0
        greedy = top_k == 0 and top_p == 0.0
        return SamplingParams.model_construct(
            n=self.num_return_sequences,
            max_tokens=self.max_tokens,
            min_tokens=min(self.min_tokens or 0, self.max_tokens),
            temperature=0.0 if greedy else (1.0 if self.temperature is None else self.temperature),
            top_k=top_k,
            top_p=top_p or 1.0,
            min_p=self.min_p or 0.0,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
            repetition_penalty=self.repetition_penalty or 1.0,
            seed=self.seed if self.seed is not None else self.random_seed,
            stop=list(self.stop_words),
            # As in TensorRT-LLM, end_id replaces the model's EOS, and -1 means no end token at all.
            stop_token_ids=[self.end_id] if self.end_id is not None and self.end_id >= 0 else [],
            ignore_eos=self.end_id is not None,
            bad_words_ids=bad_words_ids,
            logprobs=0 if self.return_log_probs else None,
            guided=self.guided(),
        )

    @model_validator(mode="after")
    def _min_within_max(self):
        if self.min_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(
                f"min_tokens ({self.min_tokens}) exceeds max_tokens ({self.max_tokens}); "
                "lower min_tokens or raise max_tokens"
            )
        return self

    @field_validator("stop_words", "bad_words", mode="before")
    @classmethod
    def _words(cls, v):
        if isinstance(v, np.ndarray):
            v = v.reshape(-1).tolist()
        if isinstance(v, str | bytes):
            v = [v]
        words = [w.decode() if isinstance(w, bytes) else w for w in (v or [])]
        return [w for w in words if w != ""]  # the ensemble's examples send "" for "none"


def generate_inputs(values: dict[str, Any]) -> GenerateInputs:
    clean = {k: v if k in ("stop_words", "bad_words") else scalar(v) for k, v in values.items()}
    try:
        return GenerateInputs.model_validate(clean)
    except ValidationError as err:
        e = err.errors()[0]
        field = ".".join(str(x) for x in e["loc"])
        msg = "unknown input or parameter" if e["type"] == "extra_forbidden" else e["msg"]
        if e["type"] == "value_error":  # a rule across inputs: its message names them
            msg = str(e["ctx"]["error"])
        raise APIError(400, f"{field}: {msg}" if field else msg) from None
