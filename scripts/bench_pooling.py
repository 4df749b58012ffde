"""Pooling throughput: trtserve's engine (`trtserve.LLM.embed` / `.score`) against HF transformers on the
same checkpoint, CPU, float32 (docs/performance.md, "Pooling").

The checkpoint has SmolLM2-135M's shapes (hidden 576, 9 heads, 3 KV heads, the 49152-token vocabulary and
its tokenizer) with `--layers` of its 30 layers and random weights: an embedder (LlamaModel, last-token
pooling, normalized) and a one-label cross-encoder (LlamaForSequenceClassification). A rerank is 1 query x
`--docs` documents of ~`--doc-tokens` tokens; `--concurrent` reranks are submitted together (the engine
batches them; HF runs them one after another, each as one padded batch of its documents).

Each row also prints the compute floor (trtserve/bench/floor.py): the docs/s if every matmul FLOP of the
call's real tokens ran at the GEMM rate measured in this run. HF's and our time are both mostly those GEMMs
(the same torch kernels), so `hf_docs_per_s / floor_docs_per_s` bounds what any engine can gain over HF.

    python scripts/bench_pooling.py --tokenizer DIR_WITH_tokenizer.json [--layers 4 --docs 32 ...]
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


def _checkpoints(root: Path, tokenizer: Path, layers: int) -> dict[str, Path]:
    from transformers import AutoModel, AutoModelForSequenceClassification, LlamaConfig

    cfg = SMOLLM2_135M | dict(
        vocab_size=49152, num_hidden_layers=layers, max_position_embeddings=2048, tie_word_embeddings=True
    )
    out = {}
    for name, auto, extra in (
        ("embed", AutoModel, {}),
        ("cross", AutoModelForSequenceClassification, {"num_labels": 1}),
    ):
        torch.manual_seed(0)
        model = auto.from_config(LlamaConfig(**cfg, **extra), dtype=torch.float32)
        model.save_pretrained(root / name)
        for f in tokenizer.iterdir():
            if f.name.startswith("tokenizer") or f.suffix == ".jinja":
                shutil.copy(f, root / name / f.name)
        out[name] = root / name
    return out


def _texts(tok, n: int, tokens: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = [w for w in tok.get_vocab() if w.isalpha() and len(w) > 3][:5000]
    return [" ".join(rng.choice(words) for _ in range(tokens)) for _ in range(n)]


def _hf_last(model, tok, texts: list[str], pairs: list[str] | None = None) -> torch.Tensor:
    """One padded batch: the embedder's normalized last hidden state, or the classifier's logit."""
    ids = [
        tok.encode(t) + ([] if pairs is None else tok.encode(p, add_special_tokens=False))
        for t, p in zip(texts, pairs or texts, strict=True)
    ]
    width = max(map(len, ids))
    x = torch.full((len(ids), width), 2, dtype=torch.long)
    mask = torch.zeros_like(x)
    for i, row in enumerate(ids):  # right padding; the last real token is pooled
        x[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
    with torch.no_grad():
        out = model(input_ids=x, attention_mask=mask)
    last = mask.sum(1) - 1
    if pairs is None:
        return torch.nn.functional.normalize(out.last_hidden_state[torch.arange(len(ids)), last], dim=-1)
    return out.logits[:, 0]


def _time(fn, fresh, repeat: int) -> float:
    """The best of `repeat` timed calls after a warm-up, each on fresh texts: a prompt seen before would be
    served by the engine's prefix cache, which HF does not have."""
    fn(fresh())
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
    ap.add_argument("--doc-tokens", type=int, default=200)
    ap.add_argument("--concurrent", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    from trtserve.bench import floor
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig
    from trtserve.engine.layout import read_engine_config
    from trtserve.llm import LLM

    torch.set_num_threads(torch.get_num_threads())
    root = Path(tempfile.mkdtemp(prefix="bench-pooling-"))
    try:
        src = _checkpoints(root, args.tokenizer, args.layers)
        tok = AutoTokenizer.from_pretrained(src["embed"])
        query = _texts(tok, 1, 12, 0)[0]
        seeds = iter(range(1, 10**6))
        for name in ("embed", "cross"):
            build_engine(
                BuildConfig(model=str(src[name]), tokens_per_block=16, max_seq_len=2048), root / f"e-{name}", quiet=True
            )
            cfg = read_engine_config(root / f"e-{name}").pretrained_config
            gemm_rate = floor.measure_gemm_rate(cfg)
            auto = AutoModel if name == "embed" else AutoModelForSequenceClassification
            hf = auto.from_pretrained(src[name], dtype=torch.float32).eval()
            with LLM(root / f"e-{name}", kv_cache_memory="1GiB", max_num_tokens=4096) as llm:
                for c in args.concurrent:

                    def fresh(c=c):  # c calls of `docs` documents each, never seen before
                        return [_texts(tok, args.docs, args.doc_tokens, next(seeds)) for _ in range(c)]

                    sample = [d for call in fresh() for d in call]  # the floor of a call like the timed ones
                    lens = [len(tok.encode(d)) + (len(tok.encode(query)) if name == "cross" else 0) for d in sample]
                    floor_s = floor.workload_flops(cfg, [(n, 0) for n in lens]) / gemm_rate

                    if name == "embed":
                        ours = _time(lambda calls: llm.embed([d for call in calls for d in call]), fresh, args.repeat)
                        theirs = _time(lambda calls, hf=hf: [_hf_last(hf, tok, d) for d in calls], fresh, args.repeat)
                    else:
                        ours = _time(
                            lambda calls: llm.score([query] * args.docs * len(calls), [d for x in calls for d in x]),
                            fresh,
                            args.repeat,
                        )
                        theirs = _time(
                            lambda calls, hf=hf: [_hf_last(hf, tok, [query] * len(d), d) for d in calls],
                            fresh,
                            args.repeat,
                        )
                    n = args.docs * c
                    row = {
                        "task": "embed" if name == "embed" else "rerank",
                        "concurrent": c,
                        "docs": n,
                        "trtserve_docs_per_s": round(n / ours, 1),
                        "hf_docs_per_s": round(n / theirs, 1),
                        "speedup": round(theirs / ours, 2),
                        "floor_docs_per_s": round(n / floor_s, 1),
                        "trtserve_fraction_of_floor": round(floor_s / ours, 2),
                        "hf_fraction_of_floor": round(floor_s / theirs, 2),
                    }
                    print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
