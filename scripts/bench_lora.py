"""Batch-8 decode with LoRA adapters vs the base model alone, and the time to load an adapter at run time.

    .venv/bin/python scripts/bench_lora.py [--dtype float32] [--threads 2] [--rank 16] [--rounds 5]

SmolLM2-135M (the packaged GGUF, nothing downloaded) built into a temp engine dir; random rank-r adapters
in PEFT's format on every q/k/v/o/gate/up/down projection. Each round runs 8 prompts under the base
model, under 4 different adapters (2 rows each, interleaved) and under 1 adapter, and times every decode
step (8 rows, one token each) inside the engine. Rounds alternate so that a busy machine slows all three
alike; the figures are the median and best step over every round.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from trtserve import LLM, SamplingParams
from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.models import decoder


def write_adapter(dest: Path, cfg: dict, rank: int, seed: int) -> Path:
    """A random PEFT LoRA adapter (A and B random, small) on every projection of the model `cfg` describes."""
    h, n_h, n_kv, hd, inter = (cfg[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                                 "head_size", "intermediate_size"))  # fmt: skip
    shapes = {
        "self_attn.q_proj": (n_h * hd, h), "self_attn.k_proj": (n_kv * hd, h), "self_attn.v_proj": (n_kv * hd, h),
        "self_attn.o_proj": (h, n_h * hd), "mlp.gate_proj": (inter, h), "mlp.up_proj": (inter, h),
        "mlp.down_proj": (h, inter),
    }  # fmt: skip
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for i in range(cfg["num_hidden_layers"]):
        for module, (n_out, n_in) in shapes.items():
            prefix = f"base_model.model.model.layers.{i}.{module}"
            tensors[prefix + ".lora_A.weight"] = torch.randn(rank, n_in, generator=g) * 0.01
            tensors[prefix + ".lora_B.weight"] = torch.randn(n_out, rank, generator=g) * 0.01
    dest.mkdir(parents=True)
    save_file(tensors, str(dest / "adapter_model.safetensors"))
    targets = [m.split(".")[1] for m in shapes]
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": targets}
    (dest / "adapter_config.json").write_text(json.dumps(config))
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=48)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="bench-lora-"))
    engine = work / "engine"
    build_engine(
        BuildConfig(model="smollm2-135m", dtype=args.dtype, quant="none", max_seq_len=2048), engine, quiet=True
    )
    cfg = json.loads((engine / "config.json").read_text())["pretrained_config"]
    dirs = {f"a{i}": str(write_adapter(work / f"a{i}", cfg, args.rank, i)) for i in range(5)}
    lora = {"adapters": {k: dirs[k] for k in ("a0", "a1", "a2", "a3")}, "max_loras": 4, "max_lora_rank": args.rank}
    llm = LLM(engine, lora=lora, kv_cache_memory=256 << 20)
    prompts = [llm.encode(f"Tell me a story about the number {i}.", chat=True) for i in range(8)]
    params = SamplingParams(max_tokens=args.tokens, temperature=0.0, ignore_eos=True)

    steps: dict[str, list[float]] = {}
    forward, current = decoder.DecoderModel.forward, [""]

    def timed(self, batch, kv, lora=None):
        start = time.perf_counter()
        out = forward(self, batch, kv, lora)
        if current[0] and batch.token_ids.shape[0] == len(prompts):  # a decode step of all 8 rows (not the warm-up)
            steps.setdefault(current[0], []).append(time.perf_counter() - start)
        return out

    decoder.DecoderModel.forward = timed
    runs = {"base": None, "4 adapters": [f"a{i % 4}" for i in range(8)], "1 adapter": "a0"}
    llm.generate(prompts, params)  # warm-up: kernels compiled, caches sized
    for _ in range(args.rounds):
        for name, adapter in runs.items():
            current[0] = name
            llm.generate(prompts, params, adapter=adapter)
    decoder.DecoderModel.forward = forward
    base = statistics.median(steps["base"])
    print(f"SmolLM2-135M {args.dtype}, {args.threads} threads, batch-8 decode steps, rank-{args.rank} adapters:")
    for name, times in steps.items():
        med, best = statistics.median(times), min(times)
        print(
            f"  {name:11s} median {1e3 * med:6.2f} ms ({8 / med:6.1f} tok/s, {base / med:.2f}x base), "
            f"best {1e3 * best:6.2f} ms, {len(times)} steps"
        )
    start = time.perf_counter()
    llm.core.lora.load("a4", dirs["a4"])
    print(
        f"  loading a rank-{args.rank} adapter at run time (hash, read, check, pack): {time.perf_counter() - start:.3f} s"
    )


if __name__ == "__main__":
    main()
