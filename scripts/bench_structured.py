"""Cost of structured outputs in the torch engine (issue 23), in one process and one run:

1. output tok/s of a batch where 0%, 50% and 100% of the requests follow a JSON schema, the three
   mixes interleaved round by round so that they see the same machine load;
2. compile time of a large JSON schema: uncached (a fresh compiler each time) vs cached.

    python scripts/bench_structured.py ENGINE_DIR [--requests 16] [--max-tokens 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from trtserve import LLM
from trtserve.engine.sampling import GuidedDecoding, SamplingParams
from trtserve.runtime.guided import Grammars

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
    },
    "required": ["name", "age", "role", "tags"],
}


def large_schema(n: int = 120) -> dict:
    """n properties mixing nested objects, enums, bounded numbers, arrays and patterns."""
    props = {}
    for i in range(n):
        kind = i % 5
        if kind == 0:
            props[f"obj_{i}"] = {
                "type": "object",
                "properties": {"a": {"type": "integer", "minimum": -i, "maximum": i}, "b": {"type": "boolean"}},
                "required": ["a", "b"],
            }
        elif kind == 1:
            props[f"enum_{i}"] = {"enum": [f"v{i}_{k}" for k in range(8)]}
        elif kind == 2:
            props[f"num_{i}"] = {"type": "number", "minimum": 0, "maximum": 10 * i + 1}
        elif kind == 3:
            props[f"arr_{i}"] = {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 4}
        else:
            props[f"code_{i}"] = {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"}
    return {"type": "object", "properties": props, "required": list(props)[: n // 2]}


def throughput(llm: LLM, prompts, fraction: float, max_tokens: int, seed: int) -> tuple[float, int]:
    guide = GuidedDecoding(kind="json_schema", spec=json.dumps(SCHEMA))
    k = round(len(prompts) * fraction)
    params = [
        SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=seed + i, guided=guide if i < k else None)
        for i in range(len(prompts))
    ]
    t = time.perf_counter()
    outs = llm.generate(prompts, params)
    dt = time.perf_counter() - t
    tokens = sum(len(o.token_ids) for o in outs)
    return tokens / dt, tokens


def compile_times(llm: LLM, repeats: int = 3) -> tuple[list[float], list[float]]:
    engine = llm.engine  # the LoadedEngine: tokenizer, eos ids, config
    guide = GuidedDecoding(kind="json_schema", spec=json.dumps(large_schema()))
    vocab = engine.config.pretrained_config.vocab_size
    Grammars(engine.tokenizer, vocab, sorted(engine.eos_token_ids)).compile(
        GuidedDecoding(kind="regex", spec="a")
    )  # xgrammar imported and TokenizerInfo built once, outside the timings
    uncached, cached = [], []
    for _ in range(repeats):
        g = Grammars(engine.tokenizer, vocab, sorted(engine.eos_token_ids))
        t = time.perf_counter()
        g.compile(guide)
        uncached.append(time.perf_counter() - t)
        t = time.perf_counter()
        g.compile(guide)
        cached.append(time.perf_counter() - t)
    return uncached, cached


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("engine")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    llm = LLM(a.engine, kv_cache_memory=1 << 30)
    prompts = [llm.encode(f"Describe person number {i} as JSON.") for i in range(a.requests)]
    throughput(llm, prompts, 1.0, 8, 0)  # warm-up: the schema compiled, kernels loaded
    print("warmed up", flush=True)
    rates: dict[float, list[float]] = {0.0: [], 0.5: [], 1.0: []}
    for r in range(a.rounds):
        for f in rates:
            rate, tokens = throughput(llm, prompts, f, a.max_tokens, 1000 * r)
            rates[f].append(rate)
            print(f"round {r}: {int(f * 100)}% constrained, {tokens} tokens, {rate:.1f} tok/s", flush=True)
    print(
        f"torch threads: {torch.get_num_threads()}, {a.requests} requests x max_tokens {a.max_tokens}, {a.rounds} rounds"
    )
    for f, rs in rates.items():
        print(
            f"  {int(f * 100):3d}% under a JSON schema: {statistics.median(rs):7.1f} output tok/s (rounds: {', '.join(f'{x:.1f}' for x in rs)})"
        )
    uncached, cached = compile_times(llm)
    print(
        f"large schema ({len(large_schema()['properties'])} properties): compile {statistics.median(uncached) * 1e3:.1f} ms "
        f"uncached (runs: {', '.join(f'{x * 1e3:.1f}' for x in uncached)}), {statistics.median(cached) * 1e6:.1f} us cached"
    )


if __name__ == "__main__":
    main()
