"""Request bodies and streamed-chunk parsing for each front end."""

from __future__ import annotations

import pytest

from trtserve.bench import endpoints as e


def test_request_bodies():
    path, body = e.request("openai", "m", [5, 6, 7], 9, ignore_eos=True)
    assert path == "/v1/completions"
    assert body["prompt"] == [5, 6, 7] and body["max_tokens"] == 9 and body["ignore_eos"] is True
    assert body["stream"] and body["stream_options"] == {"include_usage": True} and body["temperature"] == 0.0
    path, body = e.request("openai-chat", "m", "hi", 9, ignore_eos=False)
    assert path == "/v1/chat/completions" and "ignore_eos" not in body
    assert body["messages"] == [{"role": "user", "content": "hi"}] and body["max_completion_tokens"] == 9
    path, body = e.request("kserve", "m", "hi", 9, ignore_eos=True)
    assert path == "/v2/models/m/generate_stream"
    assert body == {"text_input": "hi", "max_tokens": 9, "stream": True, "exclude_input_in_output": True, "end_id": -1}
    with pytest.raises(ValueError, match="unknown backend"):
        e.request("tgi", "m", "hi", 1, True)


def test_openai_chunks():
    c = e.parse("openai", {"choices": [{"index": 0, "text": "ab", "finish_reason": None}]})
    assert c.carries_tokens and c.text == "ab" and c.finish_reason is None
    c = e.parse("openai", {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
    assert c.carries_tokens and c.finish_reason == "length"  # a held-back token still arrived
    c = e.parse("openai", {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 7}})
    assert not c.carries_tokens and (c.prompt_tokens, c.completion_tokens) == (12, 7)


def test_chat_chunks_skip_the_role_preamble():
    pre = e.parse("openai-chat", {"choices": [{"delta": {"role": "assistant", "content": ""}}]})
    assert not pre.carries_tokens
    tok = e.parse("openai-chat", {"choices": [{"delta": {"content": "x"}, "finish_reason": None}]})
    assert tok.carries_tokens and tok.text == "x"
    both = e.parse("openai-chat", {"choices": [{"delta": {"role": "assistant", "content": "y"}}]})
    assert both.carries_tokens  # some servers put the first token in the role chunk


def test_kserve_chunks_and_errors():
    c = e.parse("kserve", {"model_name": "m", "text_output": "z", "finish_reason": "length"})
    assert c.carries_tokens and c.text == "z" and c.finish_reason == "length"
    assert e.parse("kserve", {"error": "bad"}).error == "bad"
    assert e.parse("openai", {"error": {"message": "too long", "code": 400}}).error == "too long"


def test_sse_lines_split_only_at_newlines():
    import asyncio
    import json

    from trtserve.bench.client import sse_data

    texts = ["a\u2028b", "c\u0085d\u2029", "\x1ce", "f\r\ng"]  # str.splitlines would break all of these
    body = "".join(f"data: {json.dumps({'t': t}, ensure_ascii=False)}\r\n\r\n" for t in texts) + "data: [DONE]\n\n"
    raw = body.encode()

    async def chunks():
        for i in range(0, len(raw), 7):  # events straddle reads, and multi-byte characters too
            yield raw[i : i + 7]

    async def collect():
        return [p async for p in sse_data(chunks())]

    payloads = asyncio.run(collect())
    assert [json.loads(p)["t"] for p in payloads[:-1]] == texts and payloads[-1] == "[DONE]"
