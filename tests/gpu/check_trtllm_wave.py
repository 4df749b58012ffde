"""check_trtllm.py's checks for issue 54's rows (backends/tensorrt_llm/model_support.py, feature_support.py):
each wave family builds for `--backend trtllm` and equals HF transformers on the releases the adapter's table
says serve it, and is refused in one sentence naming the release elsewhere; trtserve's parser names parse
with the installed trtllm-serve; prefix reuse after a wake-up returns the model's tokens (main); the
Anthropic front end and return_metrics answer through `trtserve run` on a TensorRT-LLM engine.
Imported by check_trtllm.py (on the GPU host) and by tests/contract/test_trtllm_wave_map.py (on the fakes)."""

from __future__ import annotations

import asyncio
from pathlib import Path

# transformers model_type -> shape overrides: fp16, head_dim 64 as TensorRT-LLM's kernels want
WAVE_FAMILIES = {
    "qwen3": dict(head_dim=64),
    "phi3": {},
    "granite": {},
    "smollm3": {},
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": dict(
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, shared_expert_intermediate_size=256
    ),
    "qwen3_moe": dict(head_dim=64, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128),
}
SHAPE = dict(vocab_size=320, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4) | dict(
    num_key_value_heads=2, max_position_embeddings=256, bos_token_id=0, eos_token_id=1, pad_token_id=None
)


class Refused(Exception):
    """The adapter refused the model for this release, as its table says it should (a PASS)."""


def wave_model(dest: Path, model_type: str) -> Path:
    import torch
    from helpers import write_tokenizer
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(model_type, **(SHAPE | WAVE_FAMILIES[model_type]))
    AutoModelForCausalLM.from_config(cfg, dtype=torch.float16).save_pretrained(dest)
    write_tokenizer(dest)
    return dest


def run_wave(checks, caps, work: Path, build, check_greedy) -> None:
    """Each wave family on --backend trtllm, as the adapter's table says the installed release serves it."""
    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine

    for model_type in WAVE_FAMILIES:
        tag = f"trtllm/{model_type}"
        src = checks.run(f"{tag}: make a tiny {model_type}", wave_model, work / f"src-{model_type}", model_type)
        if src:
            args = (src, work / f"trtllm-{model_type}", caps, build, TrtllmEngine, check_greedy)
            checks.run(f"{tag}: served as the table says ({caps.line})", check_wave_family, *args)


def check_wave_family(src: Path, out: Path, caps, build, open_engine, check_greedy) -> str:
    """Built and equal to HF where the table serves it on `caps`' release; else refused naming the release."""
    import json

    from trtserve.backends.tensorrt_llm.model_support import MODELS
    from trtserve.engine.errors import UserError

    arch = json.loads((src / "config.json").read_text())["architectures"][0]
    if caps.line not in MODELS[arch].pytorch:
        try:
            build(src, out, "trtllm")
        except UserError as err:
            assert f"release line {caps.line}" in str(err) and "\n" not in str(err), err
            return f"refused as the table says: {err}"
        raise AssertionError(f"{arch} built for release line {caps.line}, which the table says cannot serve it")
    engine = open_engine(build(src, out, "trtllm"))
    try:
        return check_greedy(engine, src)
    finally:
        engine.shutdown()


def check_parser_flags(engine) -> str:
    """trtserve's parser names as this release's trtllm-serve spells them parse with its click command."""
    import importlib

    from trtserve.backends.tensorrt_llm.feature_support import parser_flags

    module = importlib.import_module("tensorrt_llm.commands.serve")
    command = next((c for c in (getattr(module, "serve", None), getattr(module, "main", None)) if c), None)
    command = getattr(command, "commands", {}).get("serve", command)
    flags = parser_flags(engine.capabilities, reasoning="deepseek_r1", tool="hermes")
    command.make_context("trtllm-serve", ["M", *flags])  # parses and checks every option; serves nothing
    return " ".join(flags) or "no parser names on this release"


def check_wake_reuse(engine, skip) -> str:
    """After sleep and wake-up a prompt of whole KV blocks decodes the same tokens (no garbage block reused)."""
    from trtserve.engine.errors import UnsupportedError
    from trtserve.engine.messages import GenerateRequest
    from trtserve.engine.sampling import SamplingParams

    prompt = [(7 * i + 3) % 300 for i in range(70)]  # two whole 32-token blocks

    async def tokens() -> list[int]:
        req = GenerateRequest(prompt, SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True))
        return [t for d in [d async for d in engine.generate(req)] for t in d.token_ids]

    async def run():
        before = await tokens()
        await engine.sleep()
        await engine.wake_up()
        return before, await tokens(), await tokens()

    try:
        before, after, again = asyncio.run(run())
    except UnsupportedError as err:  # this release or backend has no sleep (the sentence says which)
        raise skip(str(err)) from None
    assert before == after == again, f"tokens changed across a sleep: {before} / {after} / {again}"
    return "the same greedy tokens before, right after and again after a wake-up"


def check_front_ends(url: str, model: str) -> str:
    """/v1/messages and return_metrics, both trtserve's own above the TensorRT-LLM engine."""
    import httpx

    body = {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
    r = httpx.post(f"{url}/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}, timeout=60)
    assert r.status_code == 200 and r.json()["type"] == "message", r.text
    body = {"model": model, "prompt": [5, 6, 7], "max_tokens": 4, "ignore_eos": True, "return_metrics": True}
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["metrics"]["completion_tokens"] == 4, r.text
    return "Anthropic messages and return_metrics through `trtserve run`"
