"""What each front end is sent and how its streamed chunks are read.

    openai       POST /v1/completions             prompt as token ids or text, usage in the last chunk
    openai-chat  POST /v1/chat/completions        one user message (text)
    kserve       POST /v2/models/{m}/generate_stream  text_input, the TensorRT-LLM ensemble's inputs

A chunk "carries tokens" when it is a generation step (not the chat role preamble, not the usage
trailer); TTFT and ITL are timed on those chunks, as `vllm bench serve` does.
"""

from __future__ import annotations

from dataclasses import dataclass

BACKENDS = ("openai", "openai-chat", "kserve")
TEXT_ONLY = ("openai-chat", "kserve")  # token-id prompts are detokenized for these


@dataclass
class Chunk:
    carries_tokens: bool = False
    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int | None = None  # from a usage object
    prompt_tokens: int | None = None  # from a usage object
    error: str | None = None


def request(backend: str, model: str, prompt: list[int] | str, output_len: int, ignore_eos: bool) -> tuple[str, dict]:
    """The URL path and JSON body of one greedy streaming request."""
    if backend == "openai":
        body = {"model": model, "prompt": prompt, "max_tokens": output_len, "temperature": 0.0, "stream": True}
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
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if ignore_eos:
            body["ignore_eos"] = True
        return "/v1/chat/completions", body
    if backend == "kserve":
        body = {"text_input": prompt, "max_tokens": output_len, "stream": True, "exclude_input_in_output": True}
        if ignore_eos:
            body["end_id"] = -1  # TensorRT-LLM's way to ignore EOS: no end token at all
        return f"/v2/models/{model}/generate_stream", body
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
