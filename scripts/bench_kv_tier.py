"""TTFT of a request with a long shared prefix, by where its prefix's KV comes from: (a) computed
(cold), (b) the KV cache (first tier), (c) the `kv_offload` second tier after the prefix was evicted,
(d) the second tier after a restart (a new engine on the same tier directory).

Each request is the prefix plus a short question of its own, greedy, one token; the engine core is
driven directly (no HTTP), so the figures are the engine's. The KV cache holds a little more than one
such request, so a second long prompt evicts the prefix from it.

    .venv/bin/python scripts/bench_kv_tier.py engines/smollm2-135m --prefix 2000 --threads 2
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

import torch

from trtserve.engine.kv_offload import KVOffloadConfig
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.run_config import RuntimeConfig
from trtserve.engine.sampling import SamplingParams
from trtserve.runtime.engine_core import EngineCore
from trtserve.runtime.loader import load_engine

ONE = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)


def ttft(core: EngineCore, prompt: list[int]) -> tuple[float, int]:
    """Seconds to the first token, and the prompt tokens served from a cache."""
    start = time.perf_counter()
    core.add_request(GenerateRequest(prompt, ONE))
    while core.has_unfinished():
        for d in core.step():
            if d.token_ids:
                seconds, cached = time.perf_counter() - start, d.num_cached_tokens
    return seconds, cached


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine")
    ap.add_argument("--prefix", type=int, default=2000, help="tokens of the shared prefix")
    ap.add_argument("--question", type=int, default=16, help="tokens each request adds after it")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tier", default="1GiB", help="the second tier's budget")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_engine(args.engine, "cpu")
    rng = random.Random(0)
    vocab = loaded.config.pretrained_config.vocab_size

    def tokens(n: int) -> list[int]:
        return [rng.randrange(100, vocab) for _ in range(n)]

    prefix, other = tokens(args.prefix), tokens(args.prefix + args.question)
    bs = loaded.config.build_config.plugin_config.tokens_per_block
    num_blocks = -(-(args.prefix + args.question + 1) // bs) + 4  # one long request and a little more
    with tempfile.TemporaryDirectory() as tier_dir:
        cfg = RuntimeConfig(kv_offload=KVOffloadConfig(bytes=args.tier, path=tier_dir))
        core = EngineCore(loaded, cfg, num_blocks=num_blocks)
        ttft(core, tokens(64))  # warm-up: the first step's one-time costs
        rows = [("(a) cold", *ttft(core, prefix + tokens(args.question)))]
        rows.append(("(b) first tier", *ttft(core, prefix + tokens(args.question))))
        ttft(core, other)  # evicts the prefix into the second tier
        rows.append(("(c) second tier", *ttft(core, prefix + tokens(args.question))))
        ttft(core, other)
        core.close()  # a clean stop: the index is written
        start = time.perf_counter()
        core = EngineCore(loaded, cfg, num_blocks=num_blocks)
        reopen = time.perf_counter() - start
        ttft(core, tokens(64))
        rows.append(("(d) after a restart", *ttft(core, prefix + tokens(args.question))))
        core.close()
    cold = rows[0][1]
    print(f"{args.engine}: {args.prefix}-token prefix + {args.question}-token question, {args.threads} threads")
    print(f"{'case':<22}{'TTFT s':>9}{'x cold':>9}{'cached':>9}")
    for name, seconds, cached in rows:
        print(f"{name:<22}{seconds:>9.3f}{seconds / cold:>9.2f}{cached:>9}")
    print(f"reopening the engine core on the tier: {reopen:.3f} s")


if __name__ == "__main__":
    main()
