"""deterministic: true gives bitwise-identical logprobs whatever the batch, chunking or cache state."""

from __future__ import annotations

import pytest
import torch
from helpers import make_hf_model, random_prompts

from trtserve import LLM, SamplingParams
from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.kernels import int4 as int4_kernel

P = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, logprobs=3)
# Greedy runs may part only where the top two logprobs are this close (nats): a few roundings of a
# bf16 logit, which the fast and the batch-invariant kernels sum in different orders.
NEAR_TIE = 0.0625


@pytest.fixture(
    scope="module",
    params=["float32", "bfloat16", "bfloat16-w8a16", "float32-w4a16", "bfloat16-w4a16", "bfloat16-w4a16+int8act"],
)
def engine(request, tmp_path_factory):
    """(engine dir, LLM options): plain engines and weight-only quantized ones, whose linears pick
    kernels by row count too; int8act: with int8 activations."""
    name, _, variant = request.param.partition("+")
    if variant and (torch.cuda.is_available() or not int4_kernel.int8_activations_available()):
        pytest.skip("int8 activations: the CPU engine (LLM picks CUDA here), with VNNI and VBMI kernels")
    dtype, _, quant = name.partition("-")
    d = tmp_path_factory.mktemp(f"det-{name}")
    extra = {"intermediate_size": 128} if quant == "w4a16" else {}  # int4 groups of 64 divide every input
    src = make_hf_model(d / "hf", "llama", seed=4, num_key_value_heads=1, dtype=getattr(torch, dtype), **extra)
    build = {"quant": quant, "dtype": dtype} if quant else {}
    build |= {"group_size": 64} if quant == "w4a16" else {}
    build_engine(BuildConfig(model=str(src), tokens_per_block=16, **build), d / "engine", quiet=True)
    return d / "engine", {"int8_activations": True} if variant else {}


def _signature(out):
    return [(o.token_ids, [(lp.logprob, tuple(lp.top)) for lp in o.outputs[0].logprobs]) for o in [out]][0]


def test_bitwise_identical_across_batches_chunks_and_cache(engine):
    engine, opts = engine
    target = random_prompts(1, seed=50, lo=70, hi=71)[0]
    others = random_prompts(15, seed=51, lo=2, hi=100)
    runs = []
    for settings, batch in [
        (dict(max_num_tokens=512, enable_prefix_caching=False), [target]),
        (dict(max_num_tokens=16, enable_prefix_caching=False), others[:7] + [target] + others[7:]),
        (dict(max_num_tokens=64, enable_prefix_caching=True), [target[:40] + others[0]] + others + [target]),
        (
            dict(
                max_num_tokens=48,
                enable_prefix_caching=True,
                capacity_policy="max_utilization",
                kv_cache_memory=40 * 16 * 256,
            ),
            others + [target],
        ),
    ]:
        budget = settings.pop("kv_cache_memory", 8 << 20)
        llm = LLM(engine, deterministic=True, kv_cache_memory=budget, **settings, **opts)
        if settings.get("enable_prefix_caching"):
            llm.generate([target[:50]], SamplingParams(max_tokens=1))  # warm the prefix cache
        outs = llm.generate(batch, P)
        runs.append(_signature(outs[batch.index(target)]))
    assert all(r == runs[0] for r in runs[1:])


def _parting(fast, slow) -> str | None:
    """None when the runs' tokens are equal up to the first position, if any, where both runs rank
    both tokens as a near tie (their contexts differ after it); else where and how they differ."""
    for i, (a, b) in enumerate(zip(fast.token_ids, slow.token_ids, strict=True)):
        if a == b:
            continue
        for name, out in (("fast", fast), ("deterministic", slow)):
            top = dict(out.outputs[0].logprobs[i].top)
            if a not in top or b not in top or abs(top[a] - top[b]) > NEAR_TIE:
                return f"token {i}: fast {a}, deterministic {b}; the {name} run's top {top}"
        return None
    return None


def test_fast_path_matches_deterministic_tokens(engine):
    engine, opts = engine
    prompts = random_prompts(4, seed=52)
    fast = LLM(engine, kv_cache_memory=8 << 20, **opts).generate(prompts, P)
    slow = LLM(engine, kv_cache_memory=8 << 20, deterministic=True, **opts).generate(prompts, P)
    assert [_parting(f, s) for f, s in zip(fast, slow, strict=True)] == [None] * len(prompts)
