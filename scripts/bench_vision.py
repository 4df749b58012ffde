"""Image prefill: trtserve's engine against HF transformers' LlavaForConditionalGeneration on the same
checkpoint and the same images, CPU, float32; and the encoder cache on a workload that repeats images
(docs/performance.md, "Vision").

The checkpoint is LLaVA-style with random weights: a SigLIP-base-shaped tower (hidden 768, 12 heads, MLP 3072,
patch 16) with `--vision-layers` of its 12 layers at `--image-size` pixels (384: 576 image tokens, LLaVA-1.5's
count), a 2-layer MLP projector, and a SmolLM2-135M-shaped language model (hidden 576, 9 heads, 3 KV heads,
its tokenizer plus an `<image>` token) with `--layers` of its 30 layers. A request is one image (random
pixels, 640x480) and a question of ~`--question-words` words in ChatML, one output token (max_tokens=1: time
to first token). Both sides are timed from the PIL image and the text: preprocessing and tokenizing
(ours: trtserve.vision + the engine's tokenizer; HF: its LlavaProcessor), encoding and prefill.

- `prefill` rows: `concurrent` requests, each with its own image, never seen before (no cache can help).
  trtserve takes them together (the engine schedules them as a server would: chunked prefill in steps of
  `--max-num-tokens`, each step encoding the images its chunks reach in one batch); HF runs them one after
  another (`model(...)`, logits_to_keep=1: generate's prefill without its loop), as scripts/bench_pooling.py
  does.
- `encoder_cache` rows: `--requests` requests over `--distinct-images` images (different questions), on our
  engine only (HF has no encoder cache: its time is the prefill rows'), arriving one after another
  (`sequential`) or together. `all_distinct_ms` is the same workload with an image per request; the speedup is
  what reuse buys. The counts are the engine's `EngineStats.vision` over the timed call: `hit_rate` is
  hits / (hits + misses); `reuse_rate` is 1 - encoded / requests, the images not encoded. They differ where
  requests arrive together: the step encodes each distinct image once for all of them, and the requests that
  shared that encoding count as neither hits nor misses. With prefix caching on, a request whose image's
  blocks are all cached skips the encoder without asking its cache.

Each timed call uses new images (and both sides the same ones); a row is the best of `--repeat` calls after
a warm-up. Take figures on an idle machine.

    python scripts/bench_vision.py --tokenizer DIR_WITH_tokenizer.json [--layers 4 --vision-layers 4 ...]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from peers.shapes import SMOLLM2_135M
from PIL import Image

TEMPLATE = "<|im_start|>user\n<image>\n{q}<|im_end|>\n<|im_start|>assistant\n"  # llava-interleave's layout
PATCH = 16


def _checkpoint(dest: Path, tokenizer: Path, layers: int, vision_layers: int, image_size: int) -> Path:
    from transformers import (
        AutoTokenizer,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        SiglipImageProcessorPil,
        SiglipVisionConfig,
    )

    dest.mkdir(parents=True)
    for f in tokenizer.iterdir():
        if f.name.startswith("tokenizer") or f.suffix == ".jinja":
            shutil.copy(f, dest / f.name)
    tok = AutoTokenizer.from_pretrained(dest)
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    tok.save_pretrained(dest)
    text = LlamaConfig(
        **SMOLLM2_135M,
        vocab_size=len(tok),
        num_hidden_layers=layers,
        max_position_embeddings=8192,
        tie_word_embeddings=False,
    )
    tower = SiglipVisionConfig(
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=vision_layers,
        num_attention_heads=12,
        image_size=image_size,
        patch_size=PATCH,
        vision_use_head=False,  # LLaVA reads a layer's hidden states; the pooling head would be dead weight
    )
    cfg = LlavaConfig(
        vision_config=tower,
        text_config=text,
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        vision_feature_layer=-1,
        vision_feature_select_strategy="full",
        projector_hidden_act="gelu",
    )
    torch.manual_seed(0)
    LlavaForConditionalGeneration(cfg).to(torch.float32).save_pretrained(dest)
    SiglipImageProcessorPil(size={"height": image_size, "width": image_size}).save_pretrained(dest)
    return dest


def _processor(src: Path):
    from transformers import AutoTokenizer, LlavaProcessor, SiglipImageProcessorPil

    return LlavaProcessor(
        SiglipImageProcessorPil.from_pretrained(src),
        AutoTokenizer.from_pretrained(src),
        patch_size=PATCH,
        vision_feature_select_strategy="full",
        num_additional_image_tokens=0,
    )


class Workloads:
    """Calls of (image, question) requests, made from a counter: each call's images are new, and the k-th
    call of a kind is the same for both sides."""

    def __init__(self, words: list[str], question_words: int):
        self.words, self.question_words, self.next_seed = words, question_words, 1

    def _image(self) -> Image.Image:
        rng = np.random.default_rng(self.next_seed)
        self.next_seed += 1
        return Image.fromarray(rng.integers(0, 256, (480, 640, 3), dtype=np.uint8))

    def call(self, requests: int, distinct: int) -> list[tuple[Image.Image, str]]:
        images = [self._image() for _ in range(distinct)]
        rng = random.Random(self.next_seed)
        self.next_seed += 1
        questions = [" ".join(rng.choice(self.words) for _ in range(self.question_words)) for _ in range(requests)]
        return [(images[i % distinct], q) for i, q in enumerate(questions)]


def _ours(llm, vision, call, together: bool) -> dict:
    """Every request of `call` through the engine (together, or each after the last finished); their first
    tokens and the cached prompt tokens. `LLM.generate` takes no images, so this feeds the LLM's engine core
    as tests/golden/vision_goldens.py does."""
    from trtserve.engine.messages import GenerateRequest
    from trtserve.engine.request_options import RequestOptions
    from trtserve.engine.sampling import SamplingParams
    from trtserve.vision.pixels import image_input
    from trtserve.vision.prompt import expand_images

    one = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    out = {"tokens": [], "cached": 0, "prompt_tokens": []}

    def submit(items):
        reqs = []
        for img, q in items:
            images = (image_input(img, vision),)
            ids = list(llm.tokenizer.encode(expand_images(TEMPLATE.format(q=q), vision, images)))
            reqs.append(GenerateRequest(ids, one, RequestOptions(images=images)))
            out["prompt_tokens"].append(len(ids))
        for r in reqs:
            llm.core.check(r)
            llm.core.add_request(r)
        first = {}
        while llm.core.has_unfinished():
            for d in llm.core.step():
                assert d.error is None, d.error
                first.setdefault(d.request_id, d.token_ids[:1])
                out["cached"] += d.num_cached_tokens if d.finish_reason is not None else 0
        out["tokens"] += [first[r.request_id] for r in reqs]

    if together:
        submit(call)
    else:
        for item in call:
            submit([item])
    return out


def _hf(model, processor, call) -> dict:
    out = {"tokens": [], "prompt_tokens": []}
    with torch.inference_mode():
        for img, q in call:
            x = processor(text=TEMPLATE.format(q=q), images=img, return_tensors="pt")
            logits = model(**x, logits_to_keep=1).logits
            out["tokens"].append(logits[0, -1].argmax().view(1).tolist())
            out["prompt_tokens"].append(x["input_ids"].shape[1])
    return out


def _counts(llm) -> tuple[int, int, int]:
    """The engine's vision counts so far (EngineStats.vision): images encoded, cache hits, cache misses."""
    v = llm.core.stats().vision
    return v.encoded, v.cache_hits, v.cache_misses


def _best(fn, calls: list) -> tuple[float, dict]:
    """The best time over calls[1:] after calls[0] as a warm-up, and the result of the best one."""
    fn(calls[0])
    best, result = float("inf"), {}
    for call in calls[1:]:
        start = time.perf_counter()
        res = fn(call)
        took = time.perf_counter() - start
        if took < best:
            best, result = took, res
    return best, result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", type=Path, required=True, help="a dir holding SmolLM2's tokenizer.json")
    ap.add_argument("--layers", type=int, default=4, help="language model layers (SmolLM2-135M has 30)")
    ap.add_argument("--vision-layers", type=int, default=4, help="tower layers (SigLIP-base has 12)")
    ap.add_argument("--image-size", type=int, default=384, help="pixels a side; (size / 16)^2 tokens an image")
    ap.add_argument("--question-words", type=int, default=24)
    ap.add_argument("--concurrent", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--requests", type=int, default=8, help="requests of the encoder-cache workload")
    ap.add_argument("--distinct-images", type=int, default=2, help="images they share")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument(
        "--max-num-tokens", type=int, help="tokens one engine step may compute (default: the engine's, 512 on a CPU)"
    )
    args = ap.parse_args()

    from transformers import LlavaForConditionalGeneration

    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig
    from trtserve.engine.manifest import read_manifest
    from trtserve.llm import LLM

    root = Path(tempfile.mkdtemp(prefix="bench-vision-"))
    try:
        src = _checkpoint(root / "hf", args.tokenizer, args.layers, args.vision_layers, args.image_size)
        build_engine(BuildConfig(model=str(src), tokens_per_block=16, max_seq_len=8192), root / "engine", quiet=True)
        vision = read_manifest(root / "engine").vision
        processor = _processor(src)
        hf = LlavaForConditionalGeneration.from_pretrained(src, dtype=torch.float32).eval()
        words = [w for w in processor.tokenizer.get_vocab() if w.isalpha() and len(w) > 3][:5000]
        work = Workloads(words, args.question_words)
        engine = dict(kv_cache_memory="1GiB", max_num_tokens=args.max_num_tokens)

        with LLM(root / "engine", enable_prefix_caching=True, **engine) as llm:
            for c in args.concurrent:
                calls = [work.call(c, c) for _ in range(args.repeat + 1)]
                ours, mine = _best(lambda call: _ours(llm, vision, call, together=True), calls)
                theirs, hf_out = _best(lambda call, hf=hf: _hf(hf, processor, call), calls)
                assert mine["prompt_tokens"] == hf_out["prompt_tokens"], "the prompts differ from HF's processor's"
                row = {
                    "case": "prefill",
                    "concurrent": c,
                    "prompt_tokens": round(sum(mine["prompt_tokens"]) / c),
                    "image_tokens": vision.tokens_per_image,
                    "trtserve_ms": round(ours * 1000, 1),
                    "hf_ms": round(theirs * 1000, 1),
                    "trtserve_requests_per_s": round(c / ours, 2),
                    "hf_requests_per_s": round(c / theirs, 2),
                    "speedup": round(theirs / ours, 2),
                    "first_tokens_equal": mine["tokens"] == hf_out["tokens"],
                }
                print(json.dumps(row), flush=True)
        del hf

        n, k = args.requests, args.distinct_images
        for together in (False, True):
            with LLM(root / "engine", enable_prefix_caching=False, **engine) as llm:
                base, _ = _best(
                    lambda call, t=together: _ours(llm, vision, call, t),
                    [work.call(n, n) for _ in range(args.repeat + 1)],
                )
            for prefix in (False, True):
                with LLM(root / "engine", enable_prefix_caching=prefix, **engine) as llm:
                    counts = []

                    def run(call, llm=llm, counts=counts, together=together):
                        before = _counts(llm)
                        res = _ours(llm, vision, call, together)
                        counts.append([a - b for a, b in zip(_counts(llm), before, strict=True)] + [res["cached"]])
                        return res

                    took, _ = _best(run, [work.call(n, k) for _ in range(args.repeat + 1)])
                    encoded, hits, misses, cached = counts[-1]  # every timed call sees the same counts
                    row = {
                        "case": "encoder_cache",
                        "arrival": "together" if together else "sequential",
                        "requests": n,
                        "distinct_images": k,
                        "prefix_cache": prefix,
                        "trtserve_ms": round(took * 1000, 1),
                        "all_distinct_ms": round(base * 1000, 1),
                        "speedup": round(base / took, 2),
                        "encoded": encoded,
                        "cache_hits": hits,
                        "cache_misses": misses,
                        "hit_rate": round(hits / (hits + misses), 2) if hits + misses else None,
                        "reuse_rate": round(1 - encoded / n, 2),
                        "cached_prompt_tokens": cached,
                    }
                    print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
