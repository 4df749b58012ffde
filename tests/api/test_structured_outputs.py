"""Structured outputs against a live server with the official `openai` client.

The tiny model is random: its free output is noise, so the grammar is the only reason an output
parses and validates. Requests are sent concurrently to keep the module fast.
"""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import jsonschema
import openai
import pytest

pytestmark = pytest.mark.timeout(240)

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "role": {"enum": ["admin", "user", "guest"]},
        "scores": {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5}, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}, "main": {"type": "boolean"}},
            "required": ["zip", "main"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "role", "scores", "address"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
MESSAGES = [{"role": "user", "content": "Describe a person."}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)


@pytest.fixture(scope="module")
def aclient(server):
    return openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)


def gather(coros):
    async def run():
        return await asyncio.gather(*coros)

    return asyncio.run(run())


def test_fifty_seeded_requests_validate_against_a_nested_schema(server, model_name):
    async def run():
        c = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        calls = [
            c.chat.completions.create(
                model=model_name, messages=MESSAGES, response_format=FORMAT, seed=s, temperature=1.0, max_tokens=160
            )
            for s in range(50)
        ]
        return await asyncio.gather(*calls)

    outs = asyncio.run(run())
    texts = {o.choices[0].message.content for o in outs}
    for o in outs:
        assert o.choices[0].finish_reason == "stop", o.choices[0].message.content
        jsonschema.validate(json.loads(o.choices[0].message.content), SCHEMA)
    assert len(texts) > 40  # sampled: different seeds give different (valid) objects


def test_the_unconstrained_model_emits_noise(client, model_name):
    """The control: without the schema the same request does not produce the JSON."""
    out = client.chat.completions.create(model=model_name, messages=MESSAGES, seed=0, max_tokens=40)
    with pytest.raises(ValueError):
        jsonschema.validate(json.loads(out.choices[0].message.content), SCHEMA)


def test_regex_choice_and_grammar_on_completions(client, model_name):
    for seed in range(8):
        out = client.completions.create(
            model=model_name,
            prompt="id:",
            max_tokens=20,
            seed=seed,
            extra_body={"guided_regex": r"[a-z]{3}-[0-9]{2,4}"},
        )
        assert re.fullmatch(r"[a-z]{3}-[0-9]{2,4}", out.choices[0].text), out.choices[0].text
        out = client.completions.create(
            model=model_name,
            prompt="c:",
            max_tokens=10,
            seed=seed,
            extra_body={"guided_choice": ["red", "green", "blue"]},
        )
        assert out.choices[0].text in ("red", "green", "blue")
        assert out.choices[0].finish_reason == "stop"
    grammar = 'root ::= "(" num ("+" num)* ")"\nnum ::= [1-9] [0-9]?'
    out = client.completions.create(
        model=model_name, prompt="e:", max_tokens=40, seed=3, extra_body={"guided_grammar": grammar}
    )
    assert re.fullmatch(r"\([1-9][0-9]?(\+[1-9][0-9]?)*\)", out.choices[0].text), out.choices[0].text


def test_n_sequences_each_follow_the_schema_and_json_object(client, model_name):
    out = client.chat.completions.create(
        model=model_name, messages=MESSAGES, response_format=FORMAT, n=3, seed=7, max_tokens=160
    )
    assert len({c.message.content for c in out.choices}) == 3
    for c in out.choices:
        jsonschema.validate(json.loads(c.message.content), SCHEMA)
    out = client.chat.completions.create(
        model=model_name, messages=MESSAGES, response_format={"type": "json_object"}, seed=1, max_tokens=200
    )
    if out.choices[0].finish_reason == "stop":  # free JSON may outgrow max_tokens on a noise model
        assert isinstance(json.loads(out.choices[0].message.content), dict)
    else:
        assert out.choices[0].message.content.startswith("{")


def test_streaming_agrees_with_non_streaming_and_logprobs_are_after_masking(client, model_name):
    kw = dict(model=model_name, messages=MESSAGES, response_format=FORMAT, seed=11, max_tokens=160)
    whole = client.chat.completions.create(**kw, logprobs=True, top_logprobs=5)
    streamed = "".join(
        ch.choices[0].delta.content or "" for ch in client.chat.completions.create(**kw, stream=True) if ch.choices
    )
    assert streamed == whole.choices[0].message.content
    lps = whole.choices[0].logprobs.content
    # In the schema's enum, after `"role":"`, the grammar leaves only a/u/g: every alternative
    # reported there is one of them, and no reported logprob is -inf.
    assert all(t.logprob > float("-inf") for t in lps)
    assert any(len(t.top_logprobs) < 5 for t in lps)  # forced positions: fewer than 5 allowed tokens


def test_a_stop_string_still_ends_a_constrained_output(client, model_name):
    out = client.completions.create(
        model=model_name, prompt="c:", max_tokens=10, seed=0, stop=["ee"], extra_body={"guided_choice": ["green"]}
    )
    assert out.choices[0].text == "gr" and out.choices[0].finish_reason == "stop"


def test_bad_specs_are_400s_naming_the_problem(server, model_name):
    def post(body):
        return httpx.post(f"{server.url}/v1/completions", json={"model": model_name, "prompt": "x", **body}, timeout=30)

    r = post({"guided_json": {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}})
    assert r.status_code == 400 and "JSON schema cannot be compiled" in r.json()["error"]["message"], r.text
    r = post({"guided_regex": "(ab"})
    assert r.status_code == 400 and "regex cannot be compiled" in r.json()["error"]["message"], r.text
    r = post({"guided_grammar": "root ::= undefined_rule"})
    assert r.status_code == 400 and "EBNF grammar" in r.json()["error"]["message"], r.text
    r = post({"guided_regex": "a", "guided_choice": ["a"]})
    assert r.status_code == 400 and "at most one" in r.json()["error"]["message"]
    r = post({"logit_bias": {"100000": 5}})
    assert r.status_code == 400 and "logit_bias keys" in r.json()["error"]["message"]
    r = post({"logit_bias": {"5": 101}})
    assert r.status_code == 400 and "[-100, 100]" in r.json()["error"]["message"]
    r = post({"response_format": {"type": "json_schema"}})
    assert r.status_code == 400


def test_logit_bias_removes_and_forces_tokens(client, model_name, tiny_llama_engine):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_llama_engine / "tokenizer"))
    base = client.completions.create(model=model_name, prompt="The quick", max_tokens=1, temperature=0)
    first = base.choices[0].text
    assert first
    same = [i for i in range(len(tok)) if tok.decode([i]) == first]  # every token that reads as `first`
    bias = {str(i): -100 for i in same}
    banned = client.completions.create(
        model=model_name, prompt="The quick", max_tokens=1, temperature=0, logit_bias=bias
    )
    assert banned.choices[0].text != first
    sampled = client.completions.create(
        model=model_name, prompt="The quick", max_tokens=30, n=4, seed=5, logit_bias=bias, logprobs=0
    )
    seen = [t for c in sampled.choices for t in c.logprobs.tokens]
    assert len(seen) > 20 and first not in seen
    forced = client.completions.create(
        model=model_name,
        prompt="The quick",
        max_tokens=12,
        seed=5,
        logit_bias={"42": 100},
        extra_body={"ignore_eos": True},
    )
    assert forced.choices[0].text == tok.decode([42]) * 12


def test_kserve_generate_takes_tensorrt_llm_guided_parameters(server, model_name):
    url = f"{server.url}/v2/models/{model_name}/generate"
    base = {"text_input": "id:", "max_tokens": 30, "exclude_input_in_output": True, "top_k": 50, "seed": 4}
    r = httpx.post(
        url, json=base | {"guided_decoding_guide_type": "regex", "guided_decoding_guide": "[a-z]{3}-[0-9]{2}"}
    )
    assert re.fullmatch(r"[a-z]{3}-[0-9]{2}", r.json()["text_output"]), r.text
    guide = json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
    r = httpx.post(url, json=base | {"guided_decoding_guide_type": "json_schema", "guided_decoding_guide": guide})
    assert json.loads(r.json()["text_output"]) in ({"ok": True}, {"ok": False})
    r = httpx.post(
        url, json=base | {"guided_decoding_guide_type": "ebnf_grammar", "guided_decoding_guide": "root ::= ("}
    )
    assert r.status_code == 400 and "EBNF grammar cannot be compiled" in r.text
    r = httpx.post(url, json=base | {"guided_decoding_guide_type": "xml"})
    assert r.status_code == 400
    # a top-level null is not given: it leaves the same input under parameters (schemathesis found a 400 here)
    inputs = {"guided_decoding_guide_type": "regex", "guided_decoding_guide": "[a-z]{1,3}"}
    r = httpx.post(url, json=base | {"guided_decoding_guide": [None], "parameters": inputs}, timeout=60)
    assert r.status_code == 200 and re.fullmatch(r"[a-z]{1,3}", r.json()["text_output"]), r.text
    r = httpx.post(url, json=base | {"guided_decoding_guide": "[0-9]", "parameters": inputs}, timeout=60)
    assert re.fullmatch(r"[0-9]", r.json()["text_output"]), r.text  # a given top-level input wins
