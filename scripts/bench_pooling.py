"""Pooling throughput: trtserve's engine (`trtserve.LLM.embed` / `.score`) against HF transformers on the
same checkpoint, CPU (docs/performance.md, "Pooling").

The checkpoints have SmolLM2-135M's shapes (hidden 576, 9 heads, 3 KV heads, the 49152-token vocabulary and
its tokenizer) with `--layers` of its 30 layers and random weights, in `--dtype` on both sides:

    embed    LlamaModel (AutoModel), last-token pooling, normalized
    cross    a one-label cross-encoder (LlamaForSequenceClassification): query then document, its logit
    rerank   a Qwen3-Reranker-style generative reranker (LlamaForCausalLM built with --pooling rerank):
             Qwen3-Reranker's prompt around each pair, scored by the logits of its `yes` and `no` tokens

A rerank is 1 query of `--query-tokens` tokens x `--docs` documents of `--doc-tokens` tokens each (counted
by the tokenizer), every call with a query and documents never seen before; `--concurrent` calls are
submitted together (the engine batches them; HF runs them one after another, each
as one padded batch of its documents). HF's generative reranker runs as Qwen3-Reranker's model card does:
AutoModelForCausalLM over the left-padded batch (the logits of every position), then
`logits[:, -1, [yes, no]]` -> log_softmax; `hf_last_docs_per_s` is the same with `logits_to_keep=1`.

Each row also prints the compute floor (trtserve/bench/floor.py): the docs/s if every matmul FLOP of the
call's real tokens ran at the GEMM rate measured in this run (no LM head: a pooling row needs none). HF's and
our time are both mostly those GEMMs (the same torch kernels), so `hf_docs_per_s / floor_docs_per_s` bounds
what any engine can gain over HF without skipping work.

    python scripts/bench_pooling.py --tokenizer DIR_WITH_tokenizer.json [--layers 4 --docs 32 --doc-tokens 200 ...]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

import torch
from peers.shapes import SMOLLM2_135M

TASKS = ("embed", "cross", "rerank")


def _checkpoints(root: Path, tokenizer: Path, layers: int, tasks, dtype: torch.dtype) -> dict[str, Path]:
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification, LlamaConfig

    cfg = SMOLLM2_135M | dict(
        vocab_size=49152, num_hidden_layers=layers, max_position_embeddings=4096, tie_word_embeddings=True
    )
    autos = {
        "embed": (AutoModel, {}),
        "cross": (AutoModelForSequenceClassification, {"num_labels": 1}),
        "rerank": (AutoModelForCausalLM, {}),
    }
    out = {}
    for name in tasks:
        auto, extra = autos[name]
        torch.manual_seed(0)
        auto.from_config(LlamaConfig(**cfg, **extra), dtype=dtype).save_pretrained(root / name)
        for f in tokenizer.iterdir():
            if f.name.startswith("tokenizer") or f.suffix == ".jinja":
                shutil.copy(f, root / name / f.name)
        out[name] = root / name
    return out


def _texts(tok, n: int, tokens: int, seed: int) -> list[str]:
    """n texts of random words, each cut to `tokens` tokens (decoded back: re-encoding gives about as many)."""
    rng = random.Random(seed)
    words = [w for w in tok.get_vocab() if w.isalpha() and len(w) > 3][:5000]
    out = []
    for _ in range(n):
        ids = tok.encode(" ".join(rng.choice(words) for _ in range(tokens)), add_special_tokens=False)
        out.append(tok.decode(ids[:tokens]))
    return out


def _padded(ids: list[list[int]], left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, ids))
    x = torch.full((len(ids), width), 2, dtype=torch.long)
    mask = torch.zeros_like(x)
    for i, row in enumerate(ids):
        at = slice(width - len(row), width) if left else slice(0, len(row))
        x[i, at], mask[i, at] = torch.tensor(row), 1
    return x, mask


def _hf(model, task: str, ids: list[list[int]], label_ids: list[int], keep: int = 0) -> torch.Tensor:
    """One padded batch of prompts through HF: the embedder's normalized last hidden state, the cross-encoder's
    logit, or the reranker's log P(yes) over its two answer tokens (the model card's recipe; keep=1: the LM
    head on the last position only)."""
    x, mask = _padded(ids, left=task == "rerank")  # Qwen3-Reranker's tokenizer pads on the left
    with torch.no_grad():
        if task == "rerank":
            logits = model(input_ids=x, attention_mask=mask, logits_to_keep=keep).logits[:, -1, label_ids]
            return torch.log_softmax(logits.float(), dim=1)[:, 0]
        out = model(input_ids=x, attention_mask=mask)
    last = mask.sum(1) - 1  # right padding: the last real token is pooled
    if task == "embed":
        return torch.nn.functional.normalize(out.last_hidden_state[torch.arange(len(ids)), last], dim=-1)
    return out.logits[:, 0]


def _time(fn, fresh, repeat: int) -> float:
    """The best of `repeat` timed calls after a warm-up, each on fresh texts: a text seen before would be
    served by the engine's prefix cache, which HF does not have (within a call, a rerank's documents share
    its query's blocks: that reuse is the engine's to make). The warm-up runs one call of them."""
    fn(fresh()[:1])
    best = float("inf")
    for _ in range(repeat):
        texts = fresh()
        start = time.perf_counter()
        fn(texts)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", type=Path, required=True, help="a dir holding SmolLM2's tokenizer.json")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--docs", type=int, default=32)
    ap.add_argument("--doc-tokens", type=int, default=200, help="tokens of each document (the issue's ~200)")
    ap.add_argument("--query-tokens", type=int, default=16)
    ap.add_argument("--concurrent", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    ap.add_argument("--max-num-tokens", type=int, default=4096, help="the engine's token budget per step")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from trtserve.bench import floor
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig
    from trtserve.engine.layout import read_engine_config
    from trtserve.llm import LLM
    from trtserve.text.pooling import pair_ids, text_ids

    dtype = getattr(torch, args.dtype)
    root = Path(tempfile.mkdtemp(prefix="bench-pooling-"))
    try:
        src = _checkpoints(root, args.tokenizer, args.layers, args.tasks, dtype)
        tok = AutoTokenizer.from_pretrained(src[args.tasks[0]])
        seeds = iter(range(1, 10**6))
        autos = {"embed": AutoModel, "cross": AutoModelForSequenceClassification, "rerank": AutoModelForCausalLM}
        for name in args.tasks:
            build_engine(
                BuildConfig(
                    model=str(src[name]), tokens_per_block=16, max_seq_len=4096, dtype=args.dtype,
                    pooling="rerank" if name == "rerank" else None,
                ),
                root / f"e-{name}",
                quiet=True,
            )  # fmt: skip
            engine_cfg = read_engine_config(root / f"e-{name}")
            cfg, pooling = engine_cfg.pretrained_config, None
            gemm_rate = floor.measure_gemm_rate(cfg)
            hf = autos[name].from_pretrained(src[name], dtype=dtype).eval()
            with LLM(root / f"e-{name}", kv_cache_memory="1GiB", max_num_tokens=args.max_num_tokens) as llm:
                pooling = llm.engine.manifest.pooling
                labels = [pooling.yes_token_id, pooling.no_token_id] if name == "rerank" else []

                def prompts(call: tuple[str, list[str]], name=name, pooling=pooling) -> list[list[int]]:
                    query, docs = call
                    if name == "embed":
                        return [text_ids(tok, d, None) for d in docs]
                    return [pair_ids(tok, pooling, query, d, None) for d in docs]

                for c in args.concurrent:

                    def fresh(c=c):  # c calls of a query and `docs` documents each, never seen before
                        return [
                            (
                                _texts(tok, 1, args.query_tokens, next(seeds))[0],
                                _texts(tok, args.docs, args.doc_tokens, next(seeds)),
                            )
                            for _ in range(c)
                        ]

                    lens = [len(p) for call in fresh() for p in prompts(call)]  # a call like the timed ones
                    floor_s = floor.workload_flops(cfg, [(n, 0) for n in lens]) / gemm_rate
                    if name == "embed":
                        ours = _time(lambda calls: llm.embed([d for _, x in calls for d in x]), fresh, args.repeat)
                    else:
                        ours = _time(
                            lambda calls: llm.score([q for q, x in calls for _ in x], [d for _, x in calls for d in x]),
                            fresh,
                            args.repeat,
                        )

                    def theirs(calls, keep=0, hf=hf, name=name, labels=labels, prompts=prompts):
                        return [_hf(hf, name, prompts(x), labels, keep) for x in calls]

                    hf_s = _time(theirs, fresh, args.repeat)
                    n = args.docs * c
                    row = {
                        "task": name,
                        "dtype": args.dtype,
                        "concurrent": c,
                        "docs": n,
                        "mean_prompt_tokens": round(sum(lens) / len(lens)),
                        "trtserve_docs_per_s": round(n / ours, 1),
                        "hf_docs_per_s": round(n / hf_s, 1),
                        "speedup": round(hf_s / ours, 2),
                        "floor_docs_per_s": round(n / floor_s, 1),
                        "trtserve_fraction_of_floor": round(floor_s / ours, 2),
                        "hf_fraction_of_floor": round(floor_s / hf_s, 2),
                    }
                    if name == "rerank":
                        hf_last = _time(lambda calls: theirs(calls, keep=1), fresh, args.repeat)
                        row["hf_last_docs_per_s"] = round(n / hf_last, 1)
                        row["speedup_vs_hf_last"] = round(hf_last / ours, 2)
                    print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
