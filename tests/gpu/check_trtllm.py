#!/usr/bin/env python3
"""One command that checks trtserve's TensorRT-LLM adapter end to end on a GPU host, and prints a summary.

    python tests/gpu/check_trtllm.py [--out trtllm-check.json] [--keep DIR]

Needs an NVIDIA GPU, TensorRT-LLM installed (docs/tensorrt-llm.md) and trtserve's dev
dependencies (HF transformers for the reference tokens, openai for the server check). It builds tiny
random models (no downloads), so it takes minutes, not hours. For each workflow this host supports
(`trtserve doctor`'s verdicts), it checks what issue 20 found could break on a real install:

    greedy tokens equal HF transformers; sampling settings take effect (1.0's sampler switch);
    the same seed reproduces; greedy with n > 1 is a clean 400; n > 1 sampling returns n sequences;
    abort ends a stream; iteration stats arrive and the idle stats poller does not spin;
    the trtllm-serve line parses with the installed trtllm-serve; Qwen2 builds with trtllm-build;
    `trtserve run` answers the openai client;
and what issue 39 found: logprobs come back (the TensorRT path with gather_generation_logits, each
release's top-N on the PyTorch path); a prompt longer than max_num_tokens runs (chunked context);
iteration stats move while a long request decodes; an INT8-KV and an FP8 TensorRT build record the
plugin flags trtllm-build left, as planned; and issue 54's rows (check_trtllm_wave.py): each wave family
equals HF transformers on `--backend trtllm` where the installed release serves it and is refused in one
sentence elsewhere, parser names parse with trtllm-serve, prefix reuse after a wake-up (main), and
/v1/messages and return_metrics through `trtserve run`.

Every check prints PASS / FAIL / SKIP with a reason; the summary and the doctor report go to --out as
JSON. Exit status 1 if any check failed, 2 if nothing could be checked here. Please attach that JSON (and the printed summary) when you
report the result (docs/tensorrt-llm.md says where).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(Path(__file__).parent)]  # this checkout, helpers, wave

import check_trtllm_wave as wave  # noqa: E402 - beside this script, issue 54's rows

MAX_NEW = 12
MAX_NUM_TOKENS = 64  # below the tiny models' 256-token context, so a longer prompt needs chunked context


class Skip(Exception):
    """The check does not apply on this host (the reason says why)."""


@dataclass
class Result:
    check: str
    status: str  # PASS | FAIL | SKIP
    detail: str


class Checks:
    def __init__(self) -> None:
        self.results: list[Result] = []

    def run(self, name: str, fn, *args) -> object:
        value = None
        try:
            value = fn(*args)
            result = Result(name, "PASS", value if isinstance(value, str) else "")
        except Skip as why:
            result = Result(name, "SKIP", str(why))
        except Exception as err:  # noqa: BLE001 - every failure is reported, none stops the run
            result = Result(name, "FAIL", f"{type(err).__name__}: {err}")
            traceback.print_exc()
        self.results.append(result)
        print(f"[{result.status}] {name}{': ' + result.detail if result.detail else ''}", flush=True)
        return value


# ---- models and engines -------------------------------------------------------------------------------
def tiny_model(dest: Path, arch: str) -> Path:
    """A random fp16 model with head_dim 64 (TensorRT-LLM's attention kernels want common head sizes)."""
    import torch
    from helpers import make_hf_model

    shape = dict(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2)
    return make_hf_model(dest, arch, dtype=torch.float16, **shape)


def build(src: Path, out: Path, backend: str, **quant) -> Path:
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    cfg = BuildConfig(
        model=str(src), backend=backend, dtype="float16", max_batch_size=8, max_num_tokens=MAX_NUM_TOKENS, **quant
    )
    return build_engine(cfg, out, force=True, quiet=True).engine_dir


def collect(engine, prompt, **params) -> dict[int, list[int]]:
    """Token ids per sequence index of one request."""
    from trtserve.engine.messages import GenerateRequest
    from trtserve.engine.sampling import SamplingParams

    async def run():
        seqs: dict[int, list[int]] = {}
        async for d in engine.generate(GenerateRequest(list(prompt), SamplingParams(**params))):
            seqs.setdefault(d.index, []).extend(d.token_ids)
        return seqs

    return asyncio.run(run())


# ---- the checks on one open engine --------------------------------------------------------------------
def check_greedy(engine, src: Path) -> str:
    import torch
    from helpers import hf_greedy, random_prompts

    prompts = random_prompts(4, seed=1, vocab=320)
    got = [collect(engine, p, max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)[0] for p in prompts]
    expected = hf_greedy(src, prompts, MAX_NEW, dtype=torch.float16, device="cuda")
    same = sum(g == e for g, e in zip(got, expected, strict=True))
    assert same == len(prompts), f"{same}/{len(prompts)} prompts match HF transformers: {got} vs {expected}"
    return f"{len(prompts)} prompts x {MAX_NEW} tokens equal HF transformers"


def check_sampling(engine) -> str:
    prompt = [5, 17, 42, 99]
    greedy = collect(engine, prompt, max_tokens=32, temperature=0.0, ignore_eos=True)[0]
    a = collect(engine, prompt, max_tokens=32, temperature=3.0, seed=7, ignore_eos=True)[0]
    b = collect(engine, prompt, max_tokens=32, temperature=3.0, seed=7, ignore_eos=True)[0]
    assert a != greedy, "temperature 3.0 gave the greedy tokens: sampling settings are ignored"
    assert a == b, "the same seed gave different tokens"
    return "temperature 3.0 differs from greedy; seed 7 reproduces"


def check_n(engine) -> str:
    from trtserve.engine.errors import UserError

    try:
        collect(engine, [5, 6, 7], n=2, temperature=0.0, max_tokens=4)
        raise AssertionError("greedy n=2 was accepted without TLLM_ALLOW_N_GREEDY_DECODING")
    except UserError as err:
        assert "greedy decoding" in str(err), str(err)
    seqs = collect(engine, [5, 6, 7], n=2, temperature=1.0, seed=1, max_tokens=4, ignore_eos=True)
    assert len(seqs[0]) == len(seqs[1]) == 4, seqs
    return "greedy n=2 refused in one sentence; sampled n=2 gives 2 sequences"


def check_abort(engine) -> str:
    from trtserve.engine.messages import GenerateRequest
    from trtserve.engine.sampling import SamplingParams

    async def run():
        req = GenerateRequest([5, 6, 7], SamplingParams(max_tokens=200, temperature=0.0, ignore_eos=True))
        deltas = []
        async for d in engine.generate(req):
            deltas.append(d)
            if len(deltas) == 2:
                engine.abort(req.request_id)
        return deltas

    deltas = asyncio.run(run())
    assert deltas[-1].finish_reason == "abort", [d.finish_reason for d in deltas]
    return f"aborted after {sum(len(d.token_ids) for d in deltas)} tokens"


def check_stats(engine) -> str:
    deadline = time.monotonic() + 10
    while engine.stats().kv_cache.blocks_total == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    s = engine.stats()
    assert s.kv_cache.blocks_total > 0 and s.scheduler.steps > 0, f"no iteration stats after 10 s: {s}"
    calls = []
    real = engine.llm.get_stats_async
    engine.llm.get_stats_async = lambda *a, **k: calls.append(1) or real(*a, **k)  # count the poller's rounds
    time.sleep(3)  # idle
    engine.llm.get_stats_async = real
    assert len(calls) <= 10, f"the idle stats poller called get_stats_async {len(calls)} times in 3 s"
    return (
        f"{s.kv_cache.blocks_total} KV blocks, {s.scheduler.steps} steps; {len(calls)} stats rounds in 3 idle seconds"
    )


def check_stats_under_load(engine) -> str:
    """Iteration stats (what /metrics shows) move while one long request decodes."""
    from trtserve.engine.messages import GenerateRequest
    from trtserve.engine.sampling import SamplingParams

    async def run():
        seen = []
        req = GenerateRequest([5, 6, 7], SamplingParams(max_tokens=240, temperature=0.0, ignore_eos=True))
        async for d in engine.generate(req):
            seen.append(engine.stats().scheduler.steps)
            if d.finish_reason:
                break
        return seen

    seen = asyncio.run(run())
    # 1.0-1.2 deliver iteration stats in bursts 0.2 s apart: three distinct counts before the end is movement
    during = sorted(set(seen[: len(seen) * 4 // 5]))
    assert len(during) >= 3, f"iteration stats froze while the request decoded: steps seen {during}"
    return f"{len(set(seen))} distinct step counts over {len(seen)} deltas"


def check_logprobs(engine) -> str:
    """Greedy logprobs with the top alternatives this engine declares (0 on 1.0's PyTorch backend)."""
    import math

    from trtserve.engine.messages import GenerateRequest
    from trtserve.engine.sampling import SamplingParams

    k = min(2, engine.info.capabilities.max_top_logprobs)
    assert engine.info.capabilities.logprobs, "the engine declares no logprobs"

    async def run():
        req = GenerateRequest([5, 17, 42], SamplingParams(max_tokens=4, temperature=0.0, logprobs=k, ignore_eos=True))
        return [lp for d in [d async for d in engine.generate(req)] for lp in d.logprobs]

    lps = asyncio.run(run())
    assert len(lps) == 4 and all(math.isfinite(lp.logprob) and lp.logprob <= 0 for lp in lps), lps
    assert all(len(lp.top) == k and (not k or lp.top[0][0] == lp.token_id) for lp in lps), lps
    return f"4 tokens with logprobs, top {k} each (the greedy token first)"


def check_sleep(engine) -> str:
    """sleep() releases the executor's memory and wake_up() restores it: the same greedy tokens after."""
    import torch

    from trtserve.engine.errors import UnsupportedError

    before = collect(engine, [5, 6, 7], max_tokens=8, temperature=0.0, ignore_eos=True)[0]
    used = torch.cuda.mem_get_info()[1] - torch.cuda.mem_get_info()[0]
    try:
        asyncio.run(engine.sleep())
    except UnsupportedError as err:  # this release or backend has none (the sentence says which)
        raise Skip(str(err)) from None
    asleep = torch.cuda.mem_get_info()[1] - torch.cuda.mem_get_info()[0]
    asyncio.run(engine.wake_up())
    after = collect(engine, [5, 6, 7], max_tokens=8, temperature=0.0, ignore_eos=True)[0]
    assert before == after, f"greedy tokens changed across sleep: {before} vs {after}"
    return f"GPU memory in use {used / 2**30:.2f} GiB awake, {asleep / 2**30:.2f} GiB asleep; same tokens after"


def check_long_prompt(engine) -> str:
    prompt = [(7 * i + 3) % 300 for i in range(3 * MAX_NUM_TOKENS)]
    got = collect(engine, prompt, max_tokens=4, temperature=0.0, ignore_eos=True)[0]
    assert len(got) == 4, got
    return f"a {len(prompt)}-token prompt with max_num_tokens {MAX_NUM_TOKENS}"


def check_fmha_build(src: Path, work: Path, quant: str, kv: str | None) -> str:
    """A quantized TensorRT build: the engine's plugin flags (what trtllm-build left) are the planned ones."""
    from trtserve.backends.tensorrt_llm import build_plan, install
    from trtserve.build.builder import plan_build
    from trtserve.build.config import BuildConfig

    sm = install.installed_target().sm
    if quant == "fp8" and tuple(int(x) for x in sm.split(".")) < (8, 9):
        raise Skip(f"FP8 needs SM 8.9 or newer; this GPU is SM {sm}")
    out = build(src, work / f"tensorrt-{quant}-{kv}", "tensorrt", quant=quant, kv_cache_quant=kv)
    cfg = BuildConfig(model=str(src), backend="tensorrt", dtype="float16", max_batch_size=8, quant=quant)
    plan = plan_build(cfg.model_copy(update={"kv_cache_quant": kv, "max_num_tokens": MAX_NUM_TOKENS}))
    planned = build_plan.plugin_config(plan.limits, plan.quantization, sm=sm)
    built = json.loads((out / "engine" / "config.json").read_text())["build_config"]["plugin_config"]
    ours = json.loads((out / "config.json").read_text())["build_config"]["plugin_config"]
    keys = ("context_fmha", "use_paged_context_fmha", "use_fp8_context_fmha")
    assert {k: built[k] for k in keys} == {k: planned[k] for k in keys}, (built, planned)
    assert ours["use_paged_context_fmha"] == built["use_paged_context_fmha"], (ours, built)
    return ", ".join(f"{k}={built[k]}" for k in keys)


def check_serve_line(engine, backend: str) -> str:
    """The dry run's trtllm-serve line, parsed (not run) by the installed trtllm-serve's click command."""
    import importlib

    from trtserve.backends.tensorrt_llm.serve_plan import trtllm_serve_argv

    module = importlib.import_module("tensorrt_llm.commands.serve")
    command = next((c for c in (getattr(module, "serve", None), getattr(module, "main", None)) if c), None)
    command = getattr(command, "commands", {}).get("serve", command)
    if not hasattr(command, "make_context"):
        raise Skip("could not find trtllm-serve's click command in tensorrt_llm.commands.serve")
    argv = trtllm_serve_argv(engine.capabilities, backend, "M", "T", "O.yaml")
    command.make_context("trtllm-serve", argv[1:])  # parses and checks every option; serves nothing
    return " ".join(argv[:4])


def check_server(out: Path, work: Path) -> str:
    import openai
    from api.conftest import Server

    server = Server(out, log=work / "server.log")
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")
        r = client.completions.create(
            model=out.name, prompt=[5, 6, 7], max_tokens=8, temperature=0, extra_body={"ignore_eos": True}
        )
        assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 8, r
        front = wave.check_front_ends(server.url, out.name)
    finally:
        server.stop()
    return f"openai completions through `trtserve run`; {front}"


# ---- per workflow ---------------------------------------------------------------------------------------
def run_workflow(checks: Checks, backend: str, arch: str, work: Path, serve: bool) -> None:
    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine

    tag = f"{backend}/{arch}"
    src = checks.run(f"{tag}: make a tiny {arch}", tiny_model, work / f"src-{arch}", arch)
    out = (
        checks.run(f"{tag}: trtserve build --backend {backend}", build, src, work / f"{backend}-{arch}", backend)
        if src
        else None
    )
    engine = checks.run(f"{tag}: open the engine dir", TrtllmEngine, out) if out else None
    if engine is None:
        return
    try:
        checks.run(f"{tag}: greedy equals HF transformers", check_greedy, engine, src)
        if arch == "llama":
            checks.run(f"{tag}: sampling takes effect, seed reproduces", check_sampling, engine)
            checks.run(f"{tag}: n > 1", check_n, engine)
            checks.run(f"{tag}: abort", check_abort, engine)
            checks.run(f"{tag}: iteration stats, idle poller", check_stats, engine)
            checks.run(f"{tag}: iteration stats move under load", check_stats_under_load, engine)
            checks.run(f"{tag}: logprobs", check_logprobs, engine)
            checks.run(f"{tag}: a prompt longer than max_num_tokens", check_long_prompt, engine)
            checks.run(f"{tag}: sleep and wake up", check_sleep, engine)
            checks.run(f"{tag}: trtllm-serve line parses", check_serve_line, engine, backend)
            checks.run(f"{tag}: parser names parse with trtllm-serve", wave.check_parser_flags, engine)
            checks.run(f"{tag}: prefix reuse after a wake-up", wave.check_wake_reuse, engine, Skip)
    finally:
        engine.shutdown()
    if backend == "tensorrt" and arch == "llama":
        for quant, kv in (("w8a16", "int8"), ("fp8", None)):
            checks.run(f"{tag}: {quant} + {kv} KV build flags as planned", check_fmha_build, src, work, quant, kv)
    if serve:
        checks.run(f"{tag}: trtserve run + openai client", check_server, out, work)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("trtllm-check.json"), help="where the JSON report goes")
    parser.add_argument("--keep", type=Path, help="build into this dir and keep it (default: a temporary dir)")
    args = parser.parse_args()

    from trtserve.backends.tensorrt_llm import host

    report = host.gather()
    verdicts = host.verdicts(report)
    print(host.render(report, verdicts), flush=True)
    can = {v.workflow: v for v in verdicts}
    checks = Checks()
    with tempfile.TemporaryDirectory(prefix="trtllm-check-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for backend, arch, serve in (
            ("trtllm", "llama", True),
            ("tensorrt", "llama", False),
            ("tensorrt", "qwen2", False),
        ):
            verdict = (
                can[f"build --backend {backend}"]
                if backend == "tensorrt"
                else can[f"run --backend {backend} engine dirs"]
            )
            if not verdict.ok:
                checks.results.append(Result(f"{backend}/{arch}: all checks", "SKIP", verdict.why))
                print(f"[SKIP] {backend}/{arch}: {verdict.why}", flush=True)
                continue
            run_workflow(checks, backend, arch, work, serve)
        if can["run --backend trtllm engine dirs"].ok:
            wave.run_wave(checks, report.caps, work, build, check_greedy)
    counts = {s: sum(r.status == s for r in checks.results) for s in ("PASS", "FAIL", "SKIP")}
    print("\nsummary: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    for r in checks.results:
        print(f"  {r.status:<4}  {r.check}{'  -- ' + r.detail if r.detail else ''}")
    payload = {
        "host": report.to_dict(),
        "workflows": [asdict(v) for v in verdicts],
        "checks": [asdict(r) for r in checks.results],
    }
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"report written to {args.out}")
    if not counts["PASS"] and not counts["FAIL"]:
        print("nothing was checked: this host cannot run a TensorRT-LLM workflow (reasons above)")
        return 2
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
