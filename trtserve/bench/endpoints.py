"""What each front end is sent and how its streamed chunks are read.

    openai       POST /v1/completions             prompt as token ids or text, usage in the last chunk
    openai-chat  POST /v1/chat/completions        one user message (text)
    kserve       POST /v2/models/{m}/generate_stream  text_input, the TensorRT-LLM ensemble's inputs
                 (--no-stream: POST /v2/models/{m}/infer, the same inputs as KServe v2 tensors)
    grpc         Triton's gRPC ModelStreamInfer (--no-stream: ModelInfer), the same inputs; see grpc_client.py

A chunk "carries tokens" when it is a generation step (not the chat role preamble, not the usage
trailer); TTFT and ITL are timed on those chunks, as `vllm bench serve` does. Without streaming the
whole output arrives at once: TTFT is the end-to-end latency and there is no ITL.
"""

from __future__ import annotations

from dataclasses import dataclass

BACKENDS = ("openai", "openai-chat", "kserve", "grpc")
TEXT_ONLY = ("openai-chat", "kserve", "grpc")  # token-id prompts are detokenized for these
COUNTLESS = ("kserve", "grpc")  # their non-streamed answers carry no token count


@dataclass
class Chunk:
    carries_tokens: bool = False
    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int | None = None  # from a usage object
    prompt_tokens: int | None = None  # from a usage object
    error: str | None = None


def kserve_inputs(prompt: str, output_len: int, ignore_eos: bool, stream: bool) -> dict[str, str | int | bool]:
    """The TensorRT-LLM ensemble's inputs of one greedy request, for KServe infer and Triton's gRPC."""
    values = {"text_input": prompt, "max_tokens": output_len, "exclude_input_in_output": True, "stream": stream}
    if ignore_eos:
        values["end_id"] = -1  # TensorRT-LLM's way to ignore EOS: no end token at all
    return values


def _infer_body(values: dict) -> dict:
    def tensor(name: str, value) -> dict:
        dtype = "BYTES" if isinstance(value, str) else "BOOL" if isinstance(value, bool) else "INT32"
        return {"name": name, "shape": [1, 1], "datatype": dtype, "data": [value]}

    return {"inputs": [tensor(k, v) for k, v in values.items()]}


def request(
    backend: str, model: str, prompt: list[int] | str, output_len: int, ignore_eos: bool, stream: bool = True
) -> tuple[str, dict]:
    """The URL path and JSON body of one greedy request (streaming unless `stream` is false)."""
    if backend == "openai":
        body = {"model": model, "prompt": prompt, "max_tokens": output_len, "temperature": 0.0, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        if ignore_eos:
            body["ignore_eos"] = True
        return "/v1/completions", body
    if backend == "openai-chat":
        body = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_completion_tokens": output_len,
            "temperature": 0.0,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        if ignore_eos:
            body["ignore_eos"] = True
        return "/v1/chat/completions", body
    if backend == "kserve":
        values = kserve_inputs(prompt, output_len, ignore_eos, stream)
        if not stream:
            return f"/v2/models/{model}/infer", _infer_body(values)
        return f"/v2/models/{model}/generate_stream", values
    if backend == "grpc":
        raise ValueError("grpc requests are not HTTP; trtserve.bench.grpc_client sends them")
    raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")


def _error(data: dict) -> str | None:
    err = data.get("error")
    if err is None:
        return None
    return str(err.get("message", err)) if isinstance(err, dict) else str(err)


def parse(backend: str, data: dict) -> Chunk:
    """Read one decoded SSE `data:` object."""
    if (err := _error(data)) is not None:
        return Chunk(error=err)
    if backend == "kserve":
        return Chunk(True, data.get("text_output") or "", data.get("finish_reason"))
    c = Chunk()
    if usage := data.get("usage"):
        c.completion_tokens, c.prompt_tokens = usage.get("completion_tokens"), usage.get("prompt_tokens")
    choices = data.get("choices") or []
    if not choices:
        return c
    choice = choices[0]
    c.finish_reason = choice.get("finish_reason")
    if backend == "openai":
        c.carries_tokens, c.text = True, choice.get("text") or ""
    else:
        delta = choice.get("delta") or {}
        c.text = delta.get("content") or ""
        # The chat preamble ({"role": "assistant", "content": ""}) comes before any token.
        c.carries_tokens = not ("role" in delta and not c.text)
    return c


def parse_response(backend: str, data: dict) -> Chunk:
    """Read one non-streamed response body: the whole output at once."""
    if (err := _error(data)) is not None:
        return Chunk(error=err)
    if backend == "kserve":
        outputs = {o.get("name"): o for o in data.get("outputs") or []}
        values = (outputs.get("text_output") or {}).get("data") or [""]
        return Chunk(True, str(values[0]))
    c = parse(backend, {**data, "choices": []})  # the usage
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    c.carries_tokens, c.finish_reason = True, choice.get("finish_reason")
    c.text = (choice.get("text") if backend == "openai" else message.get("content")) or ""
    return c
