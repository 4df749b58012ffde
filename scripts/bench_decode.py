"""Batch-1 decode of an engine vs the memory-bandwidth roofline, measured in the same run.

    .venv/bin/python scripts/bench_decode.py ENGINE_DIR [--threads 2] [--prompt-len 128] [--new-tokens 128]

Roofline: a decode step must read every weight once (the embedding table aside: one row, unless
it is tied to the lm_head, which reads it whole), so
tokens/s <= bandwidth / weight bytes per token. Bandwidth is measured here, before and after the
decode runs, as the best of a STREAM-like read of the same bytes (CPU) and a 1-row GEMV over a matrix far
larger than the caches (scripts/peers/roofline.py), since a plain `sum` under-reports. Decode speed is
timed per engine step after the prefill, with greedy sampling and ignore_eos. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from peers import roofline


def decode_steps(llm, prompt: list[int], new_tokens: int) -> tuple[float, list[float]]:
    """(prefill seconds, per-step decode seconds) for one greedy request."""
    from trtserve.engine.messages import GenerateRequest
    from trtserve.engine.sampling import SamplingParams

    params = SamplingParams(max_tokens=new_tokens + 1, temperature=0.0, ignore_eos=True)
    llm.core.add_request(GenerateRequest(prompt, params))
    steps, last = [], time.perf_counter()
    start, prefill = last, None
    while llm.core.has_unfinished():
        out = llm.core.step()
        now = time.perf_counter()
        if any(d.token_ids for d in out):
            if prefill is None:
                prefill = now - start
            else:
                steps.append(now - last)
            last = now
    return prefill, steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("engine_dir")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--int8-activations", action="store_true", help="RuntimeConfig.int8_activations (W4A16 engines, AVX-512 VNNI)"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from trtserve import LLM

    llm = LLM(
        args.engine_dir,
        kv_cache_memory=128 << 20,
        enable_prefix_caching=False,
        int8_activations=args.int8_activations,
    )
    dtype = getattr(torch, llm.engine.config.pretrained_config.dtype)
    device = llm.engine.model.device.type  # CUDA where present (trtserve/runtime/loader.py)
    per_token = roofline.weight_bytes_per_token(Path(args.engine_dir))
    bw_before = max(roofline.bandwidths(per_token, dtype, device).values()) / 1e9
    g = torch.Generator().manual_seed(0)
    vocab = len(llm.tokenizer)
    decode_steps(llm, torch.randint(10, vocab, (args.prompt_len,), generator=g).tolist(), 4)  # warm-up
    runs = []
    for _ in range(args.repeats):
        prompt = torch.randint(10, vocab, (args.prompt_len,), generator=g).tolist()
        prefill, steps = decode_steps(llm, prompt, args.new_tokens)
        tok_s, median_ms = len(steps) / sum(steps), 1e3 * statistics.median(steps)
        runs.append({"prefill_s": prefill, "tok_per_s": tok_s, "median_step_ms": median_ms})
    bw_after = max(roofline.bandwidths(per_token, dtype, device).values()) / 1e9
    bw = (bw_before + bw_after) / 2
    tps = statistics.median(r["tok_per_s"] for r in runs)
    roof = bw * 1e9 / per_token
    print(
        json.dumps(
            {
                "engine": args.engine_dir,
                "dtype": str(dtype),
                "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                "threads": torch.get_num_threads(),
                "int8_activations": args.int8_activations,
                "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
                "weight_bytes_per_token": per_token,
                "bandwidth_gb_s": {"before": round(bw_before, 2), "after": round(bw_after, 2)},
                "roofline_tok_per_s": round(roof, 1),
                "decode_tok_per_s": round(tps, 1),
                "fraction_of_roofline": round(tps / roof, 3),
                "runs": [{k: round(v, 4) for k, v in r.items()} for r in runs],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
