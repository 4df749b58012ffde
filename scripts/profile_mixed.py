"""Where the mixed workload's time goes, per CPU path: compare.py's mixed requests (32 at once, prompts 32-512,
outputs 16-256 tokens, the same seed) run through the engine in process, each engine step timed by part.

    .venv/bin/python scripts/profile_mixed.py ENGINE_DIR [--threads 2] [--isa avx2,avx512,native]

Each `--isa` cap runs in a child process with TRTSERVE_ISA and the torch caps that go with it (the way
scripts/isa_lanes.sh runs the kernel lanes), so one machine measures the AMD EPYC AVX2, AMD EPYC AVX-512 and its
own path. Per step kind (steps that prefill some rows, and decode-only steps) it prints the seconds in:
the one-call C decode step, the op-by-op linears, attention, the per-token glue (norms, RoPE + KV write,
activations), the final norm and lm_head, the step's layout (make_batch), scheduling, sampling and emitting,
and the rest (Python between them). Against references measured in the same process: the prefill linears'
FLOP rate against the GEMM rate of the compute floor (trtserve/bench/floor.py), and the decode-only steps
against max(weight bytes / STREAM bandwidth, their FLOPs / GEMM rate) (scripts/peers/roofline.py). The HTTP
side is not here: compare.py's served figure of the same sitting against `offline_tok_s` says what it costs.
Prints JSON; docs/performance.md keeps the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from trtserve.engine.options import KV_CACHE_DTYPES  # no torch: the ISA caps still apply

PARTS = ("c_step", "linears", "attention", "glue", "lm_head", "layout", "schedule", "sample_emit")


def _timed(owner, name: str, part: str, spent: dict) -> None:
    """Wrap owner.name so its wall time adds to spent[part] (outermost call only: parts do not nest)."""
    f = getattr(owner, name)
    active = []

    def wrapper(*a, **k):
        if active:
            return f(*a, **k)
        active.append(1)
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            spent[part] += time.perf_counter() - t
            active.pop()

    setattr(owner, name, wrapper)


def profile(engine_dir: str, threads: int, seed: int, n: int, kv_dtype: str = "auto") -> dict:
    import torch

    torch.set_num_threads(threads)
    sys.path.insert(0, str(Path(__file__).parent))
    from peers import roofline

    from trtserve import LLM
    from trtserve.bench import floor
    from trtserve.bench.workload import random_requests
    from trtserve.engine.messages import GenerateRequest
    from trtserve.engine.sampling import SamplingParams
    from trtserve.kernels import decode_layers
    from trtserve.models import decoder, paged_attention
    from trtserve.runtime import engine_core, runner, scheduler

    # the mixed prompts are all new
    llm = LLM(engine_dir, kv_cache_memory=2 << 30, enable_prefix_caching=False, kv_cache_dtype=kv_dtype)
    cfg = llm.engine.config.pretrained_config
    work = random_requests(n, (32, 512), (16, 256), len(llm.tokenizer), seed)
    spent: dict[str, float] = defaultdict(float)
    model = decoder.DecoderModel
    _timed(decode_layers, "run", "c_step", spent)
    _timed(model, "_mm", "linears", spent)
    _timed(paged_attention.LayerAttention, "__call__", "attention", spent)
    for glue in ("_rope_kv", "_add_norm", "_act_mul", "_out_norm"):
        _timed(model, glue, "glue", spent)
    _timed(model, "logits", "lm_head", spent)
    _timed(runner, "make_batch", "layout", spent)
    _timed(scheduler.Scheduler, "schedule", "schedule", spent)
    _timed(engine_core.EngineCore, "_sample_and_emit", "sample_emit", spent)

    core = llm.core
    warm = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    core.add_request(GenerateRequest(work[0].prompt[:64], warm))
    while core.has_unfinished():
        core.step()
    for r in work:
        core.add_request(
            GenerateRequest(r.prompt, SamplingParams(max_tokens=r.output_len, temperature=0.0, ignore_eos=True))
        )
    kinds = {k: {"steps": 0, "seconds": 0.0, "tokens": 0, **dict.fromkeys(PARTS, 0.0)} for k in ("prefill", "decode")}
    by_rows: dict = defaultdict(lambda: [0, 0.0])
    out_tokens, decode_rows, start = 0, [], time.perf_counter()
    while core.has_unfinished():
        spent.clear()
        sched = core.scheduler.waiting or any(
            r.num_computed_tokens < r.num_prompt_tokens for r in core.scheduler.running
        )
        t = time.perf_counter()
        deltas = core.step()
        dt = time.perf_counter() - t
        k = kinds["prefill" if sched else "decode"]
        k["steps"] += 1
        k["seconds"] += dt
        new = sum(len(d.token_ids) for d in deltas)
        k["tokens"] += new
        if not sched:
            decode_rows.append(new)
            b = by_rows[min(new, 32) // 8 * 8]
            b[0], b[1] = b[0] + 1, b[1] + dt
        out_tokens += new
        for p in PARTS:
            k[p] += spent[p]
    wall = time.perf_counter() - start

    gemm = floor.measure_gemm_rate(llm.engine.model.cfg)
    per_token = roofline.weight_bytes_per_token(Path(engine_dir))
    dtype = getattr(torch, cfg.dtype)
    bw = max(roofline.bandwidths(per_token, dtype, "cpu").values())
    mcfg = llm.engine.model.cfg
    linear = floor.linear_flops_per_token(mcfg)
    prompt_tokens = sum(r.prompt_len for r in work)
    total_flops = floor.workload_flops(mcfg, [(r.prompt_len, r.output_len) for r in work])
    for k in kinds.values():
        k["rest"] = k["seconds"] - sum(k[p] for p in PARTS)
        for key in (*PARTS, "rest", "seconds"):
            k[key] = round(k[key], 3)
    pre, dec = kinds["prefill"], kinds["decode"]
    # a decode-only step reads the weights once and runs its rows' FLOPs: whichever takes longer bounds it
    per_row = linear + 2.0 * mcfg.hidden_size * mcfg.vocab_size
    dec_ideal = sum(max(per_token / bw, rows * per_row / gemm) for rows in decode_rows)
    return {
        "isa": os.environ.get("TRTSERVE_ISA", "native"),
        "threads": threads,
        "wall_s": round(wall, 2),
        "offline_tok_s": round(out_tokens / wall, 1),
        "floor_tok_s": round(out_tokens * gemm / total_flops, 1),
        "fraction_of_floor": round(out_tokens / wall / (out_tokens * gemm / total_flops), 3),
        "gemm_gflop_s": round(gemm / 1e9, 1),
        "bandwidth_gb_s": round(bw / 1e9, 1),
        "steps": kinds,
        # the prefill steps' op-by-op linears at the floor's GEMM rate (their decode rows ride along)
        "prefill_linear_fraction_of_gemm_rate": round(prompt_tokens * linear / pre["linears"] / gemm, 3)
        if pre["linears"]
        else None,
        # decode-only steps by rows (0-7, 8-15, ...): how many, and their mean ms
        "decode_steps_by_rows": {f"{r}+": [n, round(1e3 * s / n, 1)] for r, (n, s) in sorted(by_rows.items())},
        "decode_steps_fraction_of_bound": round(dec_ideal / dec["seconds"], 3) if dec["seconds"] else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("engine_dir")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0, help="compare.py's --seed")
    ap.add_argument("--requests", type=int, default=32, help="compare.py's --num-requests")
    ap.add_argument("--isa", default="", help="comma-separated TRTSERVE_ISA caps, each in a child process")
    ap.add_argument("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child or not args.isa:
        print(json.dumps(profile(args.engine_dir, args.threads, args.seed, args.requests, args.kv_cache_dtype)))
        return
    results = []
    for cap in args.isa.split(","):
        env = dict(os.environ)
        if cap != "native":
            lines = subprocess.run(
                [sys.executable, "-c", "import sys; from trtserve.kernels import native; sys.exit(native.main(sys.argv))", "env"],
                env=env | {"TRTSERVE_ISA": cap}, capture_output=True, text=True, check=True,
            ).stdout.split()  # fmt: skip
            env |= {"TRTSERVE_ISA": cap} | dict(line.split("=", 1) for line in lines)
        child = [sys.executable, __file__, args.engine_dir, "--threads", str(args.threads), "--seed", str(args.seed)]
        child += ["--requests", str(args.requests), "--kv-cache-dtype", args.kv_cache_dtype, "--child"]
        run = subprocess.run(child, env=env, capture_output=True, text=True)
        if run.returncode:
            sys.exit(f"TRTSERVE_ISA={cap}: the profile failed:\n{run.stderr[-2000:]}")
        results.append(json.loads(run.stdout.strip().splitlines()[-1]))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
