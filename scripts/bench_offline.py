"""Offline throughput: the torch engine vs HF transformers `generate` with static batches of 8.

    .venv/bin/python scripts/bench_offline.py ENGINE_DIR HF_SOURCE [--gguf FILE] [--threads 2] [--requests 64]

Same 64 requests of mixed lengths (prompts 32-512, outputs 16-256 tokens, fixed with ignore_eos)
for both, same weights, same thread count, one run. Prints useful output tokens/s for each, the
ratio, the peak KV utilization and the KV waste at that peak, and the deterministic mode's cost.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

import torch


def workload(n: int, vocab: int, seed: int = 0) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    return [([rng.randrange(3, vocab) for _ in range(rng.randint(32, 512))], rng.randint(16, 256)) for _ in range(n)]


def run_trtserve(engine_dir: str, work, **cfg) -> dict:
    from trtserve import LLM, SamplingParams

    llm = LLM(engine_dir, **cfg)
    prompts = [p for p, _ in work]
    params = [SamplingParams(max_tokens=m, temperature=0.0, ignore_eos=True) for _, m in work]
    llm.generate([prompts[0]], params[0].model_copy(update={"max_tokens": 4}))  # warm-up
    peak = {"util": 0.0, "waste": 0.0}
    step = llm.core.step

    def watched():
        out = step()
        s = llm.core.blocks.stats()
        if s.utilization >= peak["util"]:
            peak.update(util=s.utilization, waste=s.waste)
        return out

    llm.core.step = watched
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    dt = time.perf_counter() - t0
    tokens = sum(len(o.token_ids) for o in outs)
    return {
        "seconds": round(dt, 1),
        "output_tokens": tokens,
        "tok_per_s": round(tokens / dt, 1),
        "peak_kv_utilization": round(peak["util"], 3),
        "kv_waste_at_peak": round(peak["waste"], 3),
    }


def run_hf(source: str, gguf: str | None, dtype: torch.dtype, work, batch: int = 8) -> dict:
    from transformers import AutoModelForCausalLM

    kw = {"gguf_file": os.path.basename(gguf)} if gguf else {}
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(gguf) if gguf else source, dtype=dtype, **kw).eval()
    t0 = time.perf_counter()
    useful = 0
    with torch.inference_mode():
        for i in range(0, len(work), batch):
            group = work[i : i + batch]
            width = max(len(p) for p, _ in group)
            ids = torch.tensor([[0] * (width - len(p)) + p for p, _ in group])  # left padding
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in group])
            new = max(m for _, m in group)  # a static batch runs until its longest request is done
            model.generate(
                ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0
            )
            useful += sum(m for _, m in group)
    dt = time.perf_counter() - t0
    return {"seconds": round(dt, 1), "output_tokens": useful, "tok_per_s": round(useful / dt, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("engine")
    ap.add_argument("source", help="HF dir (or the GGUF's dir with --gguf)")
    ap.add_argument("--gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--deterministic", action="store_true", help="also measure deterministic mode's cost")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from pathlib import Path

    from trtserve.engine.layout import read_engine_config

    cfg = read_engine_config(Path(args.engine)).pretrained_config
    work = workload(args.requests, cfg.vocab_size)
    report = {
        "threads": args.threads,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
        "dtype": cfg.dtype,
        "requests": len(work),
        "prompt_tokens": sum(len(p) for p, _ in work),
        "output_tokens": sum(m for _, m in work),
    }
    report["trtserve"] = run_trtserve(args.engine, work, kv_cache_memory=4 << 30, max_num_tokens=2048)
    print(json.dumps({"trtserve": report["trtserve"]}), flush=True)  # each part as soon as it is measured
    if args.deterministic:
        report["trtserve_deterministic"] = run_trtserve(
            args.engine, work, kv_cache_memory=4 << 30, max_num_tokens=2048, deterministic=True
        )
        report["deterministic_cost"] = round(
            report["trtserve"]["tok_per_s"] / report["trtserve_deterministic"]["tok_per_s"], 2
        )
    if not args.skip_hf:
        report["hf_static_batch8"] = run_hf(args.source, args.gguf, getattr(torch, cfg.dtype), work)
        report["speedup_vs_hf"] = round(report["trtserve"]["tok_per_s"] / report["hf_static_batch8"]["tok_per_s"], 2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
