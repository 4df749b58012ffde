"""Speculative decoding on a live `trtserve run` of the tiny random Llama (`engine.speculative: ngram`):
greedy outputs equal HF transformers' with and without a request's opt-out (`speculate: false`) on the
OpenAI, chat and KServe routes; the Prometheus counters (vLLM's names) move by exactly what the
requests report, and stay put for opted-out requests; the per-request `spec_decode` figures appear
only when asked for (`return_spec_decode_stats`), in the body and in the last streamed chunk."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from conftest import Server
from helpers import hf_greedy, random_prompts
from prometheus_client.parser import text_string_to_metric_families
from transformers import AutoTokenizer

pytestmark = pytest.mark.timeout(300)

K = 3  # num_speculative_tokens
NEW = 24
# The tiny model answers [180] * 16 with one token repeated, so lookup's proposals are kept; then
# repeated passages whose answers do not copy them (proposals made and refused), and random prompts.
PROMPTS = [[180] * 16, [5, 6, 7, 8, 9, 10, 11, 12] * 4, [40, 41, 42] * 6 + [40, 41]] + random_prompts(2, seed=35)
TIMEOUT = 60.0
COUNTERS = ("drafts", "draft_tokens", "accepted_tokens")


@pytest.fixture(scope="module")
def spec_server(tiny_llama_engine, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("spec-server")
    cfg = tmp / "run.yaml"
    # min_acceptance 0: no sequence is paused for low acceptance, so every prompt drafts
    cfg.write_text(
        "engine:\n  speculative:\n    method: ngram\n"
        f"    num_speculative_tokens: {K}\n    prompt_lookup_min: 1\n    prompt_lookup_max: 3\n    max_batch_size: 8\n"
        "    min_acceptance: 0.0\n"
    )
    s = Server(tiny_llama_engine, "--config", str(cfg), "--kv-cache-memory", "64MiB", log=tmp / "server.log")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(spec_server):
    return openai.OpenAI(base_url=f"{spec_server.url}/v1", api_key="none", timeout=TIMEOUT, max_retries=0)


@pytest.fixture(scope="module")
def reference(tiny_llama) -> list[str]:
    """HF transformers' greedy texts of PROMPTS (what the engine must produce with or without speculation)."""
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    return [tok.decode(ids) for ids in hf_greedy(tiny_llama, PROMPTS, NEW)]


def spec_metrics(server: Server) -> dict:
    """The spec_decode counters as exposed (summed over model/version), and accepted tokens by position."""
    text = httpx.get(f"{server.url}/metrics", timeout=TIMEOUT).text
    out: dict = {"per_pos": {}}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name = s.name.removeprefix("trtserve_spec_decode_")
            if name == "num_accepted_tokens_per_pos_total":
                pos = int(s.labels["position"])
                out["per_pos"][pos] = out["per_pos"].get(pos, 0) + s.value
            elif name.startswith("num_") and name.endswith("_total"):
                key = name.removeprefix("num_").removesuffix("_total")
                out[key] = out.get(key, 0) + s.value
    return out


def complete(client, model: str, prompt: list[int], **extra):
    body = {"ignore_eos": True, **extra}
    return client.completions.create(model=model, prompt=prompt, max_tokens=NEW, temperature=0.0, extra_body=body)


def test_counters_have_vllms_names(spec_server, client, model_name):
    complete(client, model_name, PROMPTS[0])
    spec_server.wait_idle()
    text = httpx.get(f"{spec_server.url}/metrics", timeout=TIMEOUT).text
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos"):
        assert f"# TYPE trtserve_spec_decode_{name}_total counter" in text
    assert f'trtserve_spec_decode_num_drafts_total{{model="{model_name}",version="1"}}' in text
    assert 'trtserve_spec_decode_num_accepted_tokens_per_pos_total{model="' in text and 'position="0"' in text


def test_greedy_outputs_equal_with_and_without_speculation(spec_server, client, model_name, reference):
    for prompt, want in zip(PROMPTS, reference, strict=True):
        assert complete(client, model_name, prompt).choices[0].text == want
        assert complete(client, model_name, prompt, speculate=False).choices[0].text == want
    # several prompts at once: the speculating batch gives each prompt its own greedy answer
    batch = complete(client, model_name, PROMPTS)
    assert [c.text for c in sorted(batch.choices, key=lambda c: c.index)] == reference


def test_kserve_generate_and_chat_agree_with_their_opt_out(spec_server, client, model_name, tiny_llama):
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    text = tok.decode(PROMPTS[0])
    url = f"{spec_server.url}/v2/models/{model_name}/generate"
    outs = [
        httpx.post(
            url, json={"text_input": text, "max_tokens": NEW, "end_id": -1, "speculate": s}, timeout=TIMEOUT
        ).json()["text_output"]
        for s in (True, False)
    ]
    assert outs[0] == outs[1]
    messages = [{"role": "user", "content": text}]
    chats = [
        client.chat.completions.create(
            model=model_name,
            messages=messages,
            max_tokens=NEW,
            temperature=0.0,
            extra_body={"ignore_eos": True, "speculate": s},
        )
        .choices[0]
        .message.content
        for s in (True, False)
    ]
    assert chats[0] == chats[1]


def test_counters_move_by_what_the_requests_report(spec_server, client, model_name):
    spec_server.wait_idle()
    before = spec_metrics(spec_server)
    reported = []
    for prompt in PROMPTS:
        r = complete(client, model_name, prompt, return_spec_decode_stats=True)
        reported.append(r.usage.model_extra["spec_decode"])
    spec_server.wait_idle()
    after = spec_metrics(spec_server)
    moved = {k: after[k] - before.get(k, 0) for k in COUNTERS}
    assert moved == {k: sum(r[f"num_{k}"] for r in reported) for k in COUNTERS}
    assert moved["drafts"] > 0, "the repeated passages must have drafted"
    assert moved["accepted_tokens"] > 0, "the tiny model repeats itself: some proposals are kept"
    assert moved["accepted_tokens"] <= moved["draft_tokens"] <= K * moved["drafts"]
    per_pos = [after["per_pos"].get(i, 0) - before["per_pos"].get(i, 0) for i in range(K)]
    assert sum(per_pos) == moved["accepted_tokens"]
    assert per_pos == sorted(per_pos, reverse=True), "position i is kept only when position i-1 was"
    assert per_pos[0] <= moved["drafts"]
    for r in reported:  # vLLM's derived figures, from the request's own counts
        assert sum(r["num_accepted_tokens_per_pos"]) == r["num_accepted_tokens"]
        if r["num_drafts"]:
            assert r["acceptance_rate"] == pytest.approx(r["num_accepted_tokens"] / r["num_draft_tokens"])
            assert r["mean_acceptance_length"] == pytest.approx(1 + r["num_accepted_tokens"] / r["num_drafts"])


def test_an_opted_out_request_never_drafts(spec_server, client, model_name):
    spec_server.wait_idle()
    before = spec_metrics(spec_server)
    r = complete(client, model_name, PROMPTS[0], speculate=False, return_spec_decode_stats=True)
    spec_server.wait_idle()
    after = spec_metrics(spec_server)
    assert {k: after[k] - before[k] for k in COUNTERS} == dict.fromkeys(COUNTERS, 0)
    stats = r.usage.model_extra["spec_decode"]
    assert stats["num_drafts"] == 0 and stats["acceptance_rate"] is None
    assert stats["mean_acceptance_length"] is None


def test_per_request_figures_only_on_opt_in(spec_server, client, model_name, tiny_llama):
    plain = complete(client, model_name, PROMPTS[0])
    assert "spec_decode" not in (plain.usage.model_extra or {})
    asked = complete(client, model_name, PROMPTS[0], return_spec_decode_stats=True)
    stats = asked.usage.model_extra["spec_decode"]
    assert stats["num_drafts"] > 0 and asked.choices[0].text == plain.choices[0].text

    # streamed: the chunk that finishes the sequence carries the same figures; no other chunk does
    chunks = list(
        client.completions.create(
            model=model_name,
            prompt=PROMPTS[0],
            max_tokens=NEW,
            temperature=0.0,
            stream=True,
            extra_body={"ignore_eos": True, "return_spec_decode_stats": True},
        )
    )
    tagged = [c for c in chunks if "spec_decode" in (c.model_extra or {})]
    assert len(tagged) == 1 and tagged[0].choices[0].finish_reason == "length"
    assert tagged[0].model_extra["spec_decode"] == stats
    unasked = client.completions.create(
        model=model_name,
        prompt=PROMPTS[0],
        max_tokens=NEW,
        temperature=0.0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    assert not any("spec_decode" in (c.model_extra or {}) for c in unasked)

    # KServe generate: a `spec_decode` field on request, none otherwise
    url = f"{spec_server.url}/v2/models/{model_name}/generate"
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    body = {"text_input": tok.decode(PROMPTS[0]), "max_tokens": NEW, "end_id": -1}
    assert "spec_decode" not in httpx.post(url, json=body, timeout=TIMEOUT).json()
    got = httpx.post(url, json=body | {"return_spec_decode_stats": True}, timeout=TIMEOUT).json()["spec_decode"]
    assert got["num_drafts"] > 0
    with httpx.stream("POST", f"{url}_stream", json=body | {"return_spec_decode_stats": True}, timeout=TIMEOUT) as resp:
        events = [json.loads(line[5:]) for line in resp.iter_lines() if line.startswith("data:")]
    assert [("spec_decode" in e) for e in events] == [False] * (len(events) - 1) + [True]
    assert events[-1]["spec_decode"] == got

    # /v1/responses: usage.spec_decode on request
    resp = httpx.post(
        f"{spec_server.url}/v1/responses",
        json={"model": model_name, "input": "hi hi hi hi", "max_output_tokens": 8, "return_spec_decode_stats": True},
        timeout=TIMEOUT,
    ).json()
    assert set(resp["usage"]["spec_decode"]) >= {"num_drafts", "num_draft_tokens", "num_accepted_tokens"}


def test_the_opt_out_field_is_validated(spec_server, model_name):
    r = httpx.post(
        f"{spec_server.url}/v1/completions",
        json={"model": model_name, "prompt": "hi", "max_tokens": 2, "speculate": "sometimes"},
        timeout=TIMEOUT,
    )
    assert r.status_code == 400 and "speculate" in r.text


@pytest.fixture(scope="module")
def draft_server(tiny_llama_engine, tmp_path_factory):
    """The engine as its own draft model: every proposal is the target's own greedy token."""
    tmp = tmp_path_factory.mktemp("draft-server")
    cfg = tmp / "run.yaml"
    cfg.write_text(
        "engine:\n  speculative:\n    method: draft_model\n"
        f"    num_speculative_tokens: {K}\n    draft_engine_dir: {tiny_llama_engine}\n    max_batch_size: 8\n"
    )
    s = Server(tiny_llama_engine, "--config", str(cfg), "--kv-cache-memory", "64MiB", log=tmp / "server.log")
    yield s
    s.stop()


def test_a_draft_model_equal_to_the_target_has_every_proposal_kept(draft_server, model_name, reference):
    client = openai.OpenAI(base_url=f"{draft_server.url}/v1", api_key="none", timeout=TIMEOUT, max_retries=0)
    draft_server.wait_idle()
    before = spec_metrics(draft_server)
    reported = []
    for prompt, want in zip(PROMPTS, reference, strict=True):
        r = complete(client, model_name, prompt, return_spec_decode_stats=True)
        assert r.choices[0].text == want
        reported.append(r.usage.model_extra["spec_decode"])
    draft_server.wait_idle()
    after = spec_metrics(draft_server)
    moved = {k: after[k] - before.get(k, 0) for k in COUNTERS}
    assert moved == {k: sum(r[f"num_{k}"] for r in reported) for k in COUNTERS}
    assert moved["drafts"] > 0 and moved["accepted_tokens"] == moved["draft_tokens"]
    for r in reported:
        assert r["acceptance_rate"] == 1.0
        assert r["num_accepted_tokens_per_pos"][0] == r["num_drafts"]  # every draft's first proposal kept


def test_bench_reports_the_runs_acceptance(spec_server, model_name):
    from rich.console import Console

    from trtserve.bench.client import run_benchmark
    from trtserve.bench.report import table
    from trtserve.bench.stats import summarize
    from trtserve.bench.workload import BenchRequest

    reqs = [BenchRequest(p, len(p), NEW) for p in PROMPTS[:3]]
    spec_server.wait_idle()
    before = spec_metrics(spec_server)
    run = asyncio.run(run_benchmark(spec_server.url, "openai", model_name, reqs, max_concurrency=1, progress=False))
    after = spec_metrics(spec_server)
    m = run.server_metrics
    moved = {k: after[k] - before[k] for k in COUNTERS}
    assert {k: m[f"spec_decode_num_{k}"] for k in COUNTERS} == moved and moved["accepted_tokens"] > 0
    assert m["spec_decode_acceptance_rate"] == pytest.approx(moved["accepted_tokens"] / moved["draft_tokens"])
    assert m["spec_decode_mean_acceptance_length"] == pytest.approx(1 + moved["accepted_tokens"] / moved["drafts"])
    console = Console(width=200, record=True)
    console.print(table(summarize(run)))
    printed = console.export_text()
    assert f"{m['spec_decode_acceptance_rate']:.1%}" in printed.split("Spec decode acceptance rate")[1].split("\n")[0]
    assert "Spec decode mean acceptance length" in printed
