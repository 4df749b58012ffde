"""The official `openai` client against the live server."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from trtserve import SamplingParams


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")


def test_models(client, model_name, server):
    models = client.models.list().data
    assert [m.id for m in models] == [model_name]
    assert client.models.retrieve(model_name).id == model_name


def test_completion_greedy_equals_offline(client, model_name, offline):
    prompt = "The quick brown fox"
    expected = offline.generate(prompt, SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True))[0]
    r = client.completions.create(
        model=model_name, prompt=prompt, max_tokens=12, temperature=0, extra_body={"ignore_eos": True}
    )
    assert r.choices[0].text == expected.text
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len(expected.prompt_token_ids)
    assert r.usage.completion_tokens == 12 and r.usage.total_tokens == r.usage.prompt_tokens + 12


def test_completion_prompt_forms(client, model_name, offline):
    ids = offline.encode("Paged attention")
    r = client.completions.create(
        model=model_name, prompt=[ids, ids], max_tokens=5, temperature=0, extra_body={"ignore_eos": True}
    )
    assert len(r.choices) == 2 and r.choices[0].text == r.choices[1].text
    r2 = client.completions.create(
        model=model_name,
        prompt=["Paged attention", "A model"],
        max_tokens=5,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert r2.choices[0].text == r.choices[0].text and [c.index for c in r2.choices] == [0, 1]
    assert r2.usage.completion_tokens == 10


def test_stream_equals_non_stream_for_the_same_seed(client, model_name):
    kw = dict(
        model=model_name,
        prompt="Continuous batching",
        max_tokens=16,
        temperature=0.9,
        seed=42,
        extra_body={"ignore_eos": True},
    )
    full = client.completions.create(**kw).choices[0].text
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == full
    assert chunks[-1].usage.completion_tokens == 16 and not chunks[-1].choices
    again = client.completions.create(**kw).choices[0].text
    assert again == full


def test_chat_completion_and_stream(client, model_name, offline):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
    ids = offline.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)[
        "input_ids"
    ]
    expected = offline.generate([list(ids)], SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True))[0].text
    r = client.chat.completions.create(
        model=model_name, messages=messages, max_tokens=10, temperature=0, extra_body={"ignore_eos": True}
    )
    assert r.choices[0].message.role == "assistant" and r.choices[0].message.content == expected
    assert r.usage.prompt_tokens == len(ids)
    stream = client.chat.completions.create(
        model=model_name, messages=messages, max_tokens=10, temperature=0, stream=True, extra_body={"ignore_eos": True}
    )
    parts = list(stream)
    assert parts[0].choices[0].delta.role == "assistant"
    assert "".join(p.choices[0].delta.content or "" for p in parts) == expected
    assert parts[-1].choices[0].finish_reason == "length"


def test_n_choices_and_logprobs(client, model_name):
    r = client.chat.completions.create(
        model=model_name,
        messages=[{"role": "user", "content": "hi"}],
        n=3,
        max_tokens=6,
        temperature=1.0,
        seed=3,
        logprobs=True,
        top_logprobs=2,
        extra_body={"ignore_eos": True},
    )
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    for c in r.choices:
        assert len(c.logprobs.content) == 6 and all(len(t.top_logprobs) == 2 for t in c.logprobs.content)
    assert r.usage.completion_tokens == 18
    c = client.completions.create(
        model=model_name,
        prompt="hello",
        max_tokens=4,
        temperature=0,
        logprobs=3,
        echo=True,
        extra_body={"ignore_eos": True},
    )
    lp = c.choices[0].logprobs
    assert c.choices[0].text.startswith("hello")
    assert len(lp.tokens) == len(lp.token_logprobs) == c.usage.prompt_tokens - 1 + 4


def test_stop_strings(client, model_name):
    base = client.completions.create(
        model=model_name, prompt="The model", max_tokens=24, temperature=0, extra_body={"ignore_eos": True}
    )
    text = base.choices[0].text
    stop = text[6:9]
    r = client.completions.create(
        model=model_name, prompt="The model", max_tokens=24, temperature=0, stop=[stop], extra_body={"ignore_eos": True}
    )
    assert r.choices[0].text == text[: text.index(stop)] and r.choices[0].finish_reason == "stop"
    s = client.completions.create(
        model=model_name,
        prompt="The model",
        max_tokens=24,
        temperature=0,
        stop=stop,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    assert "".join(c.choices[0].text for c in s) == r.choices[0].text


def test_async_client_concurrency(server, model_name, offline):
    """Eight completions and a chat stream in flight together each get their own greedy answer."""
    prompts = [f"request {i}" for i in range(8)]
    greedy = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    expected = [o.text for o in offline.generate(prompts, greedy)]
    messages = [{"role": "user", "content": "x"}]
    chat_ids = offline.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True
    )
    chat_expected = offline.generate([list(chat_ids["input_ids"])], greedy)[0].text
    kw = dict(model=model_name, max_tokens=8, temperature=0, extra_body={"ignore_eos": True})

    async def main():
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused")

        async def chat_stream():
            return [p async for p in await client.chat.completions.create(messages=messages, stream=True, **kw)]

        *rs, parts = await asyncio.gather(*(client.completions.create(prompt=p, **kw) for p in prompts), chat_stream())
        await client.close()
        return rs, parts

    rs, parts = asyncio.run(main())
    assert [r.choices[0].text for r in rs] == expected
    assert all(r.usage.completion_tokens == 8 and r.choices[0].finish_reason == "length" for r in rs)
    assert "".join(p.choices[0].delta.content or "" for p in parts if p.choices) == chat_expected
    assert parts[-1].choices[0].finish_reason == "length"


def test_errors_are_openai_style(client, model_name, server):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model_name, prompt="x", max_tokens=10, extra_body={"bogus": 1})
    assert "bogus" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model_name, prompt="x " * 200, max_tokens=200)
    assert "max_seq_len (256)" in str(e.value) and "max_tokens (200)" in str(e.value)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x", max_tokens=2)
    for body in (
        {"model": model_name, "prompt": "x", "temperature": -1},
        {"model": model_name, "prompt": "x", "n": 0},
        {"model": model_name, "prompt": []},
        {"model": model_name, "prompt": "x", "max_tokens": "ten"},
        {"model": model_name, "prompt": "x", "logit_bias": {"99999": 1}},  # not a token id of this vocab
    ):
        r = httpx.post(f"{server.url}/v1/completions", json=body)
        assert r.status_code == 400, (body, r.text)
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    r = httpx.post(f"{server.url}/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    r = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": model_name, "messages": [{"role": "wizard", "content": "x"}]},
    )
    assert r.status_code == 400 and "role" in r.json()["error"]["message"]


def test_tokenize_detokenize_and_request_id(server, offline):
    r = httpx.post(f"{server.url}/tokenize", json={"prompt": "Héllo wörld"}, headers={"X-Request-Id": "abc-123"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "abc-123"
    ids = r.json()["tokens"]
    assert ids == list(offline.tokenizer.encode("Héllo wörld")) and r.json()["count"] == len(ids)
    d = httpx.post(f"{server.url}/detokenize", json={"tokens": ids}).json()
    assert d["prompt"] == offline.tokenizer.decode(ids)
    assert httpx.post(f"{server.url}/detokenize", json={"tokens": [10**6]}).status_code == 400
    assert len(httpx.get(f"{server.url}/health").headers["x-request-id"]) == 32


def test_metrics_count_tokens_and_requests(server, client, model_name):
    before = server.metric("trtserve_generation_tokens_total")
    client.completions.create(
        model=model_name, prompt="count me", max_tokens=7, temperature=0, extra_body={"ignore_eos": True}
    )
    text = httpx.get(f"{server.url}/metrics").text
    assert server.metric("trtserve_generation_tokens_total") == before + 7
    for name in (
        "trtserve_time_to_first_token_seconds_bucket",
        "trtserve_inter_token_latency_seconds_bucket",
        "trtserve_e2e_request_latency_seconds_count",
        "trtserve_request_queue_time_seconds_count",
        "trtserve_kv_cache_usage_ratio",
        "trtserve_kv_cache_cached_blocks",
        "trtserve_kv_cache_waste_ratio",
        "trtserve_prompt_tokens_total",
        "trtserve_prefix_cache_queries_total",
        "trtserve_prefix_cache_hits_total",
        "trtserve_num_preemptions_total",
        'trtserve_request_success_total{finished_reason="length"',
        'trtserve_http_requests_total{model="tiny-llama",status="200",version="1"}',
    ):
        assert name in text, name
    assert f'model="{model_name}"' in text


def test_seed_edges_are_accepted(client, model_name):
    for seed in (-1, 0, 2**64 - 1):
        r = client.completions.create(model=model_name, prompt="x", max_tokens=3, n=2, temperature=1.0, seed=seed)
        assert len(r.choices) == 2


def test_min_tokens_over_max_tokens_is_400(client, model_name):
    """A 10^9 min_tokens ran to max_tokens; now it is refused, naming both."""
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(
            model=model_name, prompt="x", max_tokens=4, extra_body={"min_tokens": 10**9}, timeout=30
        )
    assert "min_tokens (1000000000) exceeds max_tokens (4)" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=model_name,
            messages=[{"role": "user", "content": "x"}],
            max_completion_tokens=3,
            extra_body={"min_tokens": 5},
            timeout=30,
        )
    assert "min_tokens (5) exceeds max_tokens (3)" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:  # unset max_tokens: the rest of the 256-token context
        client.completions.create(model=model_name, prompt="x", extra_body={"min_tokens": 1000}, timeout=30)
    assert "min_tokens (1000) exceeds max_tokens" in str(e.value) and "rest of the context" in str(e.value)
    ok = client.completions.create(model=model_name, prompt="x", max_tokens=3, extra_body={"min_tokens": 3}, timeout=30)
    assert ok.usage.completion_tokens == 3


def test_openapi_lists_the_statuses_and_rules(server):
    spec = httpx.get(f"{server.url}/openapi.json", timeout=10).json()
    paths = spec["paths"]
    assert {"400", "404", "429", "503", "504"} <= set(paths["/v1/completions"]["post"]["responses"])
    assert {"403", "404", "409"} <= set(paths["/admin/models/{model}/load"]["post"]["responses"])
    assert {"403", "404"} <= set(paths["/v2/repository/models/{model}/load"]["post"]["responses"])
    live = paths["/v2/health/live"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert live == {"$ref": "#/components/schemas/Live"}
    files = paths["/v1/files"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    purpose = spec["components"]["schemas"][files["$ref"].rsplit("/", 1)[1]]["properties"]["purpose"]
    assert purpose["const"] == "batch" or purpose.get("enum") == ["batch"]
    replay = paths["/v1/replay"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert replay["required"] == ["receipt"]
    invalidate = paths["/v1/cache/invalidate"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert invalidate["required"] == ["namespace"]
