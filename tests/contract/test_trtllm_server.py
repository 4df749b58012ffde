"""`trtserve run` on a `--backend trtllm` engine dir, TensorRT-LLM replaced by each release's fake
(on the server's PYTHONPATH), driven by the official `openai` client and plain HTTP."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import openai
import pytest
from trtllm_fake import RELEASES, load_toy_model, pythonpath

fake = load_toy_model()

VOCAB = 320
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=RELEASES)
def live(request, trtllm_engine_dir, tmp_path_factory):
    from api.conftest import Server

    env = {"PYTHONPATH": pythonpath(request.param, str(REPO))}
    s = Server(trtllm_engine_dir, "--kv-cache-memory", "1MiB", env=env, log=tmp_path_factory.mktemp("logs") / "s.log")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused")


@pytest.fixture(scope="module")
def tokenizer(trtllm_engine_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(trtllm_engine_dir / "tokenizer"))


def test_completion_text_is_the_engines_tokens_detokenized(client, trtllm_engine_dir, tokenizer):
    ids = tokenizer.encode("The quick brown fox")
    expected = fake.reference_greedy(ids, 8, VOCAB)
    r = client.completions.create(
        model=trtllm_engine_dir.name, prompt=ids, max_tokens=8, temperature=0, extra_body={"ignore_eos": True}
    )
    assert r.choices[0].text == tokenizer.decode(expected, skip_special_tokens=True)
    assert r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ids), 8)


def test_stream_equals_non_stream(client, trtllm_engine_dir):
    kw = dict(model=trtllm_engine_dir.name, prompt="Paged attention", max_tokens=10, temperature=0)
    whole = client.completions.create(**kw, extra_body={"ignore_eos": True}).choices[0].text
    chunks = list(client.completions.create(**kw, stream=True, extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole
    assert chunks[-1].choices[0].finish_reason == "length"


def test_chat_stream(client, trtllm_engine_dir):
    stream = client.chat.completions.create(
        model=trtllm_engine_dir.name, messages=[{"role": "user", "content": "Hi"}], max_tokens=5, stream=True
    )
    reasons = [c.choices[0].finish_reason for c in stream if c.choices]
    assert reasons[-1] in ("length", "stop")


def test_unsupported_setting_is_a_400(client, trtllm_engine_dir):
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=trtllm_engine_dir.name, prompt="x", max_tokens=2, extra_body={"priority": 1})
    assert "priority: request priority is not supported by the tensorrt_llm backend" in str(err.value)


def test_metrics_come_from_the_engine(live, client, trtllm_engine_dir):
    client.completions.create(model=trtllm_engine_dir.name, prompt="abc", max_tokens=3, extra_body={"ignore_eos": True})
    assert live.metric("trtserve_generation_tokens_total") >= 3
    deadline = time.monotonic() + 5  # iteration stats are polled about once a second
    while live.metric("trtserve_kv_cache_total_blocks") == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live.metric("trtserve_kv_cache_total_blocks") == (1 << 20) // 512 // 32
    assert 'finished_reason="length"' in httpx.get(f"{live.url}/metrics").text


def test_kserve_generate(live, trtllm_engine_dir, tokenizer):
    """Greedy unless top_k / top_p is set, as TensorRT-LLM's ensemble; end_id -1: no end token."""
    ids = tokenizer.encode("The capital")
    expected = tokenizer.decode(fake.reference_greedy(ids, 4, VOCAB), skip_special_tokens=True)
    assert expected.strip()  # four tokens that decode to text: an empty answer could not pass
    for exclude, prefix in [(True, ""), (False, "The capital")]:
        body = {"text_input": "The capital", "max_tokens": 4, "end_id": -1, "exclude_input_in_output": exclude}
        r = httpx.post(f"{live.url}/v2/models/{trtllm_engine_dir.name}/generate", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["text_output"] == prefix + expected


@pytest.mark.parametrize("release", ["1.0", "main"])
def test_speculative_acceptance_in_the_response_and_metrics(release, trtllm_engine_dir, tmp_path):
    """main reports acceptance per request and per iteration: the response's counts are what /metrics
    counted for it; 1.0 reports none, so both stay 0 (never estimated)."""
    from api.conftest import Server

    env = {"PYTHONPATH": pythonpath(release, str(REPO))}
    args = ("--kv-cache-memory", "1MiB", "--speculative", "ngram", "--speculative-tokens", "3")
    s = Server(trtllm_engine_dir, *args, env=env, log=tmp_path / "s.log")
    try:
        client = openai.OpenAI(base_url=f"{s.url}/v1", api_key="unused", timeout=30)
        r = client.completions.create(
            model=trtllm_engine_dir.name,
            prompt=[5, 17, 42, 99, 7],
            max_tokens=24,
            temperature=0,
            extra_body={"ignore_eos": True, "return_spec_decode_stats": True},
        )
        assert r.choices[0].text  # speculation is lossless: the tokens are checked in test_trtllm_speculative.py
        spec = r.usage.model_extra["spec_decode"]
        name = "trtserve_spec_decode_num_draft_tokens_total"
        deadline = time.monotonic() + 10  # a bound on the wait: iteration stats are polled
        while release == "main" and s.metric(name) < spec["num_draft_tokens"] and time.monotonic() < deadline:
            time.sleep(0.1)
        counted = (s.metric(name), s.metric("trtserve_spec_decode_num_accepted_tokens_total"))
        if release == "main":
            assert spec["num_draft_tokens"] > 0 and spec["num_drafts"] == 0  # passes are not reported per request
            assert counted == (spec["num_draft_tokens"], spec["num_accepted_tokens"])
            assert spec["acceptance_rate"] == spec["num_accepted_tokens"] / spec["num_draft_tokens"]
            assert s.metric("trtserve_spec_decode_num_drafts_total") > 0
        else:
            assert (spec["num_draft_tokens"], spec["acceptance_rate"]) == (0, None) and counted == (0, 0)
    finally:
        s.stop()


# ---- issue 54, the wave's front ends: trtllm-serve has neither, trtserve serves both above the engine ------
def test_anthropic_messages_are_served_above_the_engine(live, trtllm_engine_dir, tokenizer):
    """No release's trtllm-serve has /v1/messages (feature_support.py "anthropic"): trtserve's own front end
    runs over the TensorRT-LLM engine as over any other."""
    body = {"model": trtllm_engine_dir.name, "max_tokens": 6, "temperature": 0}
    body["messages"] = [{"role": "user", "content": "Hello"}]
    r = httpx.post(f"{live.url}/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}, timeout=30)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["type"] == "message" and out["role"] == "assistant"
    assert out["usage"]["output_tokens"] == 6 or out["stop_reason"] == "end_turn"


def test_return_metrics_come_from_trtserve_timings(live, trtllm_engine_dir):
    """TensorRT-LLM's return_perf_metrics is not asked for: the timings are trtserve's own, around the engine."""
    body = {"model": trtllm_engine_dir.name, "prompt": "abc", "max_tokens": 3, "ignore_eos": True}
    r = httpx.post(f"{live.url}/v1/completions", json=body | {"return_metrics": True}, timeout=30)
    assert r.status_code == 200, r.text
    m = r.json()["usage"]["metrics"]
    assert m["completion_tokens"] == 3 and m["time_to_first_token"] <= m["e2e_latency"]
