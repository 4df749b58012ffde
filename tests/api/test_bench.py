"""`trtserve bench` against the live tiny server: every front end, exact token accounting, /metrics deltas."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from trtserve.bench.client import run_benchmark
from trtserve.bench.stats import summarize
from trtserve.bench.workload import random_requests, shared_prefix

N = 8


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trtserve.cli", "bench", "--no-progress", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


@pytest.mark.parametrize("backend", ["openai", "kserve"])
def test_cli_against_trtserve(server, model_name, tiny_llama_engine, tmp_path, backend):
    out = tmp_path / "bench.json"
    args = ["--backend", backend, "--base-url", server.url, "--model", model_name, "-n", str(N)]
    args += ["--input-len", "8:40", "--output-len", "3:12", "--seed", "4", "--json", str(out)]
    args += ["--tokenizer", str(tiny_llama_engine), "--slo", "ttft=60000,tpot=60000"]
    args += ["--floor", str(tiny_llama_engine)] if backend == "openai" else []
    proc = _cli(*args)
    assert proc.returncode == 0, proc.stderr
    assert "Output token throughput" in proc.stdout
    s = json.loads(out.read_text())
    want = random_requests(N, (8, 40), (3, 12), vocab_size=320, seed=4)  # the engine's vocab, via --tokenizer
    assert s["completed"] == N and s["failed"] == 0
    assert s["output_lens"] == [r.output_len for r in want]  # ignore_eos: exactly what was asked
    assert s["request_goodput"] == pytest.approx(s["request_throughput"])  # generous SLOs: every request is good
    m = s["server_metrics"]
    assert m["generation_tokens"] == s["total_output_tokens"]  # the server generated exactly what we counted
    assert m["preemptions"] == 0 and 0 <= m["peak_kv_cache_usage"] <= 1  # sampled: a short run may show 0
    if backend == "openai":  # token-id prompts: the server saw exactly the workload's tokens
        assert s["input_lens"] == [r.prompt_len for r in want]
        assert m["prefix_cache_queries"] == s["total_input_tokens"]
    for key in ("median_ttft_ms", "p99_tpot_ms", "mean_itl_ms", "p90_e2el_ms", "output_throughput"):
        assert s[key] > 0
    if backend == "openai":  # --floor: the served tokens' FLOPs, from the engine's own config
        from trtserve.bench.floor import workload_flops
        from trtserve.engine.layout import read_engine_config

        cfg = read_engine_config(tiny_llama_engine).pretrained_config
        f = s["floor"]
        assert f["workload_tflop"] * 1e12 == pytest.approx(
            workload_flops(cfg, zip(s["input_lens"], s["output_lens"], strict=True))
        )
        assert f["achieved_output_tok_s"] == pytest.approx(s["output_throughput"])
        assert f["fraction_of_floor"] == pytest.approx(s["output_throughput"] / f["floor_output_tok_s"])
        assert "of the floor" in proc.stdout


def test_chat_and_kserve_itl_count_every_token(server, model_name):
    reqs = random_requests(N, (4, 30), (2, 10), vocab_size=256, seed=9)
    for backend in ("openai-chat", "kserve"):
        run = asyncio.run(run_benchmark(server.url, backend, model_name, reqs, max_concurrency=3, progress=False))
        s = summarize(run)
        assert s["completed"] == N, s["errors"]
        for r, want in zip(run.results, reqs, strict=True):
            assert r.output_tokens == want.output_len
            assert len(r.itl) == want.output_len - 1  # one streamed chunk per generated token
            assert 0 < r.ttft <= r.latency
        assert run.server_metrics["generation_tokens"] == sum(r.output_len for r in reqs)


def test_peaks_are_sampled_while_requests_run(server, model_name):
    reqs = random_requests(4, 40, 96, vocab_size=320, seed=2)  # 96 steps each: long enough for several polls
    run = asyncio.run(run_benchmark(server.url, "openai", model_name, reqs, progress=False))
    m = run.server_metrics
    assert 1 <= m["peak_num_requests_running"] <= 4
    # 4 sequences of up to 136 tokens hold at most 4 * 9 blocks of 16 tokens.
    total = server.metric("trtserve_kv_cache_total_blocks")
    assert 0 < m["peak_kv_cache_usage"] <= 4 * 9 / total
    # Only tail blocks are part-filled: at most 15 of a sequence's >= 40 + 15 slots.
    assert 0 <= m["kv_cache_waste_at_peak"] <= 15 / 55


def test_poisson_rate_and_shared_prefix_reuse(server, model_name):
    reqs = shared_prefix(2, 4, prefix_len=48, question_len=4, output_len=3, vocab_size=320, seed=1)
    run = asyncio.run(
        run_benchmark(server.url, "openai", model_name, reqs, request_rate=40.0, burstiness=0.5, progress=False)
    )
    s = summarize(run)
    assert s["completed"] == len(reqs)
    starts = [r.start_time for r in run.results]
    assert starts == sorted(starts) and starts[-1] >= len(reqs) / 40.0 - 0.05  # the last goes out at n / rate
    m = s["server_metrics"]
    # 16-token blocks: each of the 6 requests after the first of its prefix can reuse 48 cached tokens (3 blocks).
    assert m["prefix_cache_hits"] >= 48 and m["prefix_cache_hit_rate"] > 0


def test_bad_flags_and_unreachable_server(server, model_name):
    proc = _cli("--model", "m", "--base-url", "http://127.0.0.1:1", "-n", "1")
    assert proc.returncode == 2 and proc.stderr.startswith("error: cannot reach the server at http://127.0.0.1:1")
    assert "Traceback" not in proc.stderr
    proc = _cli("--model", model_name, "--base-url", server.url, "--output-len", "0")
    assert proc.returncode == 2 and "--output-len '0' is not a length" in proc.stderr
    proc = _cli("--model", model_name, "--base-url", server.url, "--slo", "ttft=fast")
    assert proc.returncode == 2 and "--slo item 'ttft=fast' is not valid" in proc.stderr
    proc = _cli("--model", "nope", "--base-url", server.url, "-n", "2", "--input-len", "4", "--output-len", "2")
    assert proc.returncode == 2 and "all 2 requests failed" in proc.stderr and "is not served here" in proc.stderr


def test_kserve_end_id_minus_one_ignores_eos(server, model_name, offline):
    """TensorRT-LLM semantics, which the kserve backend relies on: end_id replaces EOS; -1 means none."""
    import httpx

    from trtserve import SamplingParams

    prompts = random_requests(64, (3, 12), 1, vocab_size=320, seed=21)
    texts = [offline.tokenizer.decode(r.prompt) for r in prompts]
    outs = offline.generate(texts, SamplingParams(max_tokens=24, temperature=0.0), chat=False)
    stopped = [(t, len(o.token_ids)) for t, o in zip(texts, outs, strict=True) if o.finish_reason == "stop"]
    if not stopped:
        pytest.skip("no prompt of this random model reaches EOS greedily")
    text, n = stopped[0]
    url = f"{server.url}/v2/models/{model_name}/generate"
    body = {"text_input": text, "max_tokens": 24, "exclude_input_in_output": True}
    default = httpx.post(url, json=body, timeout=60).json()
    assert default["finish_reason"] == "stop"
    ignored = httpx.post(url, json=body | {"end_id": -1}, timeout=60).json()
    assert ignored["finish_reason"] == "length"
    assert ignored["text_output"].startswith(default["text_output"]) and len(ignored["text_output"]) > len(
        default["text_output"]
    )
