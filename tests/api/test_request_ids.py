"""Client request ids are only echoed: any characters, any length up to the limit, repeated or
concurrent, on KServe (`id`) and OpenAI (`X-Request-Id`); each request gets its own output."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from trtserve import SamplingParams

IDS = ["a#1", "a#", "#", "x/y/z", "with spaces in it", "ünï-cødé 東京 🙂", "r" * 300, "", "-0", "42"]
PROMPTS = [f"Request number {i} says" for i in range(20)]
TIMEOUT = 60


def _greedy(offline, prompt: str, n: int) -> str:
    return offline.generate(prompt, SamplingParams(max_tokens=n, temperature=0.0))[0].text


def _infer_body(rid: str, prompt: str, n: int = 5) -> dict:
    return {
        "id": rid,
        "inputs": [
            {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": [prompt]},
            {"name": "max_tokens", "datatype": "INT32", "shape": [1], "data": [n]},
            {"name": "exclude_input_in_output", "datatype": "BOOL", "shape": [1], "data": [True]},
        ],
    }


@pytest.mark.parametrize("rid", IDS)
def test_kserve_infer_and_generate_echo_any_id(server, model_name, offline, rid):
    want = _greedy(offline, "The quick brown fox", 5)
    r = httpx.post(
        f"{server.url}/v2/models/{model_name}/infer", json=_infer_body(rid, "The quick brown fox"), timeout=TIMEOUT
    )
    assert r.status_code == 200, r.text
    assert r.json()["id"] == rid and r.json()["outputs"][0]["data"] == [want]
    g = httpx.post(
        f"{server.url}/v2/models/{model_name}/generate",
        json={"id": rid, "text_input": "The quick brown fox", "max_tokens": 5, "exclude_input_in_output": True},
        timeout=TIMEOUT,
    )
    assert g.status_code == 200, g.text
    assert g.json()["id"] == rid and g.json()["text_output"] == want
    with httpx.stream(
        "POST",
        f"{server.url}/v2/models/{model_name}/generate_stream",
        json={"id": rid, "text_input": "The quick brown fox", "max_tokens": 5, "exclude_input_in_output": True},
        timeout=TIMEOUT,
    ) as s:
        events = [json.loads(line[5:]) for line in s.iter_lines() if line.startswith("data:")]
    assert all(e["id"] == rid for e in events) and "".join(e["text_output"] for e in events) == want


def test_twenty_concurrent_requests_sharing_one_id(server, model_name, offline):
    want = [_greedy(offline, p, 6) for p in PROMPTS]

    async def main():
        async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as c:
            infers = [c.post(f"/v2/models/{model_name}/infer", json=_infer_body("same#id", p, 6)) for p in PROMPTS]
            gens = [
                c.post(
                    f"/v2/models/{model_name}/generate",
                    json={"id": "same#id", "text_input": p, "max_tokens": 6, "exclude_input_in_output": True},
                )
                for p in PROMPTS
            ]
            chats = [
                c.post(
                    "/v1/completions",
                    json={"model": model_name, "prompt": p, "max_tokens": 6, "temperature": 0},
                    headers={"X-Request-Id": "same#id"},
                )
                for p in PROMPTS
            ]
            return await asyncio.gather(*infers, *gens, *chats)

    rs = asyncio.run(main())
    assert all(r.status_code == 200 for r in rs), [r.text for r in rs if r.status_code != 200][:1]
    infer, gen, cmpl = rs[:20], rs[20:40], rs[40:]
    assert [r.json()["outputs"][0]["data"][0] for r in infer] == want
    assert all(r.json()["id"] == "same#id" for r in infer + gen)
    assert [r.json()["text_output"] for r in gen] == want
    assert [r.json()["choices"][0]["text"] for r in cmpl] == want
    assert all(r.headers["x-request-id"] == "same#id" for r in cmpl)
    server.wait_idle()


@pytest.mark.parametrize("rid", IDS[:-3])  # a header value cannot be empty
def test_openai_echoes_any_x_request_id(server, model_name, offline, rid):
    raw = rid.encode()  # UTF-8 bytes in the header; the server echoes the very same bytes
    r = httpx.post(
        f"{server.url}/v1/completions",
        json={"model": model_name, "prompt": "The quick brown fox", "max_tokens": 5, "temperature": 0},
        headers=[(b"X-Request-Id", raw)],
        timeout=TIMEOUT,
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == _greedy(offline, "The quick brown fox", 5)
    assert dict(r.headers.raw)[b"x-request-id"] == raw


def test_ids_over_the_limit_are_refused(server, model_name):
    long = "x" * 1025
    r = httpx.post(f"{server.url}/v2/models/{model_name}/infer", json=_infer_body(long, "hi"), timeout=TIMEOUT)
    assert r.status_code == 400 and "id" in r.json()["error"]
    g = httpx.post(
        f"{server.url}/v2/models/{model_name}/generate", json={"id": long, "text_input": "hi"}, timeout=TIMEOUT
    )
    assert g.status_code == 400 and "1024" in g.json()["error"]
    o = httpx.post(
        f"{server.url}/v1/completions",
        json={"model": model_name, "prompt": "hi", "max_tokens": 2},
        headers={"X-Request-Id": long},
        timeout=TIMEOUT,
    )
    assert o.status_code == 400 and "X-Request-Id" in o.json()["error"]["message"]
