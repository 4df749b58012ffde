"""Speculative decoding vs none on the same engine, same prompts, one run: output tok/s and acceptance.

    .venv/bin/python scripts/bench_spec.py [ENGINE_DIR] [--threads 2] [--k 4] [--workloads rag,free,mixed,switch,draft]

ENGINE_DIR: SmolLM2-135M-Instruct dequantized to float32 (engines/smollm2-135m-f32: configs/demo-smollm2.yaml
with --quant none, the engine docs/speculative.md's figures were measured on), built here when it is missing. Two engines are loaded side by side, one
plain and one speculating, and each workload runs on both, prompt by prompt alternating which goes
first, so a busy machine slows both alike. Greedy throughout, so both must give the same tokens (checked).

  rag      batch 1: a chat prompt holding a passage and asking for it (or a part of it) back: the
           answer copies the prompt, where n-gram lookup pays (target >= 1.8x). Printed twice: over
           all 12 prompts, and (rag-quoting) over those whose plain answer does copy the passage (half
           its tokens in 8-token runs of the prompt); the small model answers some with text of its own
  free     batch 1: free-text questions whose answers copy little (target >= 0.95x: no loss)
  mixed    32 random-token requests at once, prompts 32-512, outputs 16-256 tokens, twice with fresh
           prompts (target >= 0.95x)
  switch   the rag prompts 1, 2, 3, 4, 6, 8 and 9 at once, under the default switch (it speculates where the
           expected accepted tokens outweigh the measured cost, never above 8): throughput must not fall
           off a cliff as the batch grows
  draft    batch 1, the rag prompts with `draft_model` and the engine as its own draft: every proposal
           is kept (acceptance 100%), so the figure is what verification and drafting cost
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PASSAGES = [
    "The Rhine is a river that begins in the Swiss Alps, flows through Germany and the Netherlands, and "
    "empties into the North Sea. It is about 1,230 kilometres long and has been an important trade route "
    "since Roman times, carrying coal, grain and wine between the cities along its banks.",
    "Photosynthesis is the process by which green plants use sunlight, water and carbon dioxide to make "
    "glucose and oxygen. It takes place in the chloroplasts, which contain the green pigment chlorophyll. "
    "The oxygen we breathe is released as a by-product of this process.",
    "To reset the router, unplug it from the power socket and wait thirty seconds. Plug it back in and "
    "wait until the status light turns solid green. Then open a browser, go to the setup page and sign "
    "in with the password printed on the label under the device.",
    "Marie Curie was a physicist and chemist who conducted pioneering research on radioactivity. She was "
    "the first woman to win a Nobel Prize, the first person to win Nobel Prizes in two sciences, and the "
    "first woman to become a professor at the University of Paris.",
    "The meeting is moved from Tuesday to Thursday at ten in the morning. Please bring the quarterly "
    "report, the budget for the new office, and your questions about the hiring plan. Lunch will be "
    "served in the small conference room after the meeting.",
    "Python lists are ordered, mutable collections. You can add an item with append, remove one with "
    "remove or pop, and sort the list in place with sort. Slicing a list returns a new list that holds "
    "a copy of the selected items.",
]
ASKS = [
    "Repeat the passage above word for word.",
    "Copy the text above exactly, without changing anything.",
]
FREE = [
    "Write a short story about a dragon who learns to bake bread.",
    "Why is the sky blue? Explain it to a child.",
    "Give me three ideas for a birthday party in the garden.",
    "What are the benefits of learning a second language?",
    "Describe a walk through a forest in autumn.",
    "How do I become better at public speaking?",
]


def ensure_engine(engine: Path) -> None:
    if (engine / "config.json").exists():
        return
    cmd = [sys.executable, "-m", "trtserve.cli", "build", "--config", str(ROOT / "configs/demo-smollm2.yaml")]
    subprocess.run([*cmd, "--quant", "none", "-o", str(engine), "--force"], check=True)


def timed(llm, prompts, params, chat: bool) -> tuple[float, list]:
    start = time.perf_counter()
    outs = llm.generate(prompts, params, chat=chat)
    return time.perf_counter() - start, outs


def compare(plain, spec, batches: list, params, chat: bool) -> list[dict]:
    """Each batch on both engines (alternating which runs first): per batch, the seconds, tokens, outputs
    and speculation counts (`summarize` adds them up). params: one SamplingParams for every prompt, or one
    list of them per batch."""
    parts = []
    for i, batch in enumerate(batches):
        order = [("off", plain), ("spec", spec)]
        secs, results = {}, {}
        for label, llm in order if i % 2 == 0 else order[::-1]:
            secs[label], results[label] = timed(llm, batch, params[i] if isinstance(params, list) else params, chat)
        off, on = results["off"], results["spec"]
        parts.append(
            {
                "secs": secs,
                "tokens": sum(len(o.token_ids) for o in off),
                "differing": sum(a.token_ids != b.token_ids for a, b in zip(off, on, strict=True)),
                "counts": [c.spec for o in on for c in o.outputs],
                "quoting": all(quotes(o) for o in off),
            }
        )
    return parts


def quotes(out, n: int = 8) -> bool:
    """Whether most of an answer copies its prompt: at least half its tokens lie in runs of n tokens that
    also occur in the prompt."""
    prompt, answer = out.prompt_token_ids, out.token_ids
    grams = {tuple(prompt[i : i + n]) for i in range(len(prompt) - n + 1)}
    covered = set()
    for i in range(len(answer) - n + 1):
        if tuple(answer[i : i + n]) in grams:
            covered.update(range(i, i + n))
    return len(covered) >= len(answer) / 2


def summarize(name: str, parts: list[dict]) -> dict:
    """One row: throughput both ways, speedup, acceptance (vLLM's definitions)."""
    from trtserve.serve.speculative import stats_field

    off, on = sum(p["secs"]["off"] for p in parts), sum(p["secs"]["spec"] for p in parts)
    tokens, mismatches = sum(p["tokens"] for p in parts), sum(p["differing"] for p in parts)
    acc = stats_field([c for p in parts for c in p["counts"]])
    row = {
        "workload": name,
        "batches": len(parts),
        "output_tokens": tokens,
        "off_tok_s": tokens / off,
        "spec_tok_s": tokens / on,
        "speedup": off / on,
        "acceptance_rate": acc["acceptance_rate"],
        "mean_acceptance_length": acc["mean_acceptance_length"],
        "drafts": acc["num_drafts"],
        "outputs_differing": mismatches,
    }
    rate = "-" if row["acceptance_rate"] is None else f"{row['acceptance_rate']:.1%}"
    length = "-" if row["mean_acceptance_length"] is None else f"{row['mean_acceptance_length']:.2f}"
    print(
        f"{name:11s} {len(parts):3d} bat {tokens:6d} tok  off {row['off_tok_s']:7.1f} tok/s  "
        f"spec {row['spec_tok_s']:7.1f} tok/s  x{row['speedup']:.2f}  acceptance {rate}  "
        f"mean length {length}  differing outputs {mismatches}",
        flush=True,
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("engine", nargs="?", type=Path, default=ROOT / "engines/smollm2-135m-f32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    ap.add_argument("--max-tokens", type=int, default=128, help="batch-1 workloads' output budget")
    ap.add_argument("--workloads", default="rag,free,mixed,switch,draft", help="which to run, in this order [all]")
    ap.add_argument("--json", type=Path, help="write the rows here too")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ensure_engine(args.engine)

    from trtserve import LLM, SamplingParams
    from trtserve.bench.workload import random_requests
    from trtserve.kernels.native import cpu_model

    kv = {"kv_cache_memory": 2 << 30}  # 32 sequences of up to 768 tokens fit: no preemption in `mixed`
    ngram = {"method": "ngram", "num_speculative_tokens": args.k}
    plain = LLM(args.engine, **kv)
    spec = LLM(args.engine, speculative=ngram, **kv)
    greedy = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)
    for llm in (plain, spec):  # warm-up: first-call allocations and kernel choices out of the timings
        llm.generate(["Hello"], SamplingParams(max_tokens=8, temperature=0.0))
    print(f"{cpu_model()}, {args.threads} threads, {args.engine.name}, k={args.k}", flush=True)

    rag = [f"{p}\n\n{ask}" for p in PASSAGES for ask in ASKS]
    rows = []
    for name in args.workloads.split(","):
        if name == "rag":
            parts = compare(plain, spec, [[p] for p in rag], greedy, chat=True)
            rows.append(summarize("rag", parts))
            rows.append(summarize("rag-quoting", [p for p in parts if p["quoting"]]))
        elif name == "free":
            rows.append(summarize("free", compare(plain, spec, [[p] for p in FREE], greedy, chat=True)))
        elif name == "mixed":
            # two 32-request batches (fresh prompts: no prefix-cache hits), the second in the reverse order
            mixed = [random_requests(32, (32, 512), (16, 256), plain.tokenizer.vocab_size, seed) for seed in (0, 1)]
            params = [
                [SamplingParams(max_tokens=r.output_len, temperature=0.0, ignore_eos=True) for r in m] for m in mixed
            ]
            batches = [[r.prompt for r in m] for m in mixed]
            rows.append(summarize("mixed", compare(plain, spec, batches, params, chat=False)))
        elif name == "switch":
            for b in (1, 2, 3, 4, 6, 8, 9):  # past where it stops paying, and past the limit (8)
                batch = [(rag * b)[i] for i in range(b)]
                rows.append(summarize(f"rag@{b}", compare(plain, spec, [batch, batch[::-1]], greedy, chat=True)))
        elif name == "draft":
            draft = {"method": "draft_model", "num_speculative_tokens": args.k, "draft_engine_dir": str(args.engine)}
            drafting = LLM(args.engine, speculative=draft, **kv)
            drafting.generate(["Hello"], SamplingParams(max_tokens=8, temperature=0.0))
            parts = compare(plain, drafting, [[p] for p in rag], greedy, chat=True)
            rows.append(summarize("draft", parts))
            rows.append(summarize("draft-quoting", [p for p in parts if p["quoting"]]))
            del drafting
        else:
            raise SystemExit(f"unknown workload {name!r}; give some of rag,free,mixed,switch,draft")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_model(), "threads": args.threads, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
