"""Measure `trtserve build` time and peak RSS for the demo model and a random TinyLlama-1.1B shape.

    .venv/bin/python scripts/measure_build.py [--workdir /tmp/trtserve-measure] [--skip-tinyllama] [--threads 2]

Prints one line per model: build seconds, peak RSS, output weight bytes, and RSS / weights, with
the thread count and the CPU. Builds run one at a time; other processes on the host still count.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from trtserve.kernels.native import cpu_model

SHAPES = {
    "tinyllama": dict(hidden=2048, layers=22, heads=32, kv_heads=4, inter=5632, vocab=32000, tied=False),
    # SmolLM2-135M's shape (the demo model's config), for machines without the demo package's weights
    "smollm2": dict(hidden=576, layers=30, heads=9, kv_heads=3, inter=1536, vocab=49152, tied=True),
}
TINYLLAMA = SHAPES["tinyllama"]


def make_tinyllama(dest: Path) -> Path:
    return make_random(dest, "tinyllama")


def make_random(dest: Path, shape: str, dtype: str = "bfloat16") -> Path:
    """A random HF Llama dir of one of SHAPES, written shard by shard (one per layer) to keep this
    script's memory low; the tokenizer is the tests' small byte-level one."""
    from transformers import LlamaConfig

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from helpers import write_tokenizer

    s = SHAPES[shape]
    dt = getattr(torch, dtype)
    dest.mkdir(parents=True, exist_ok=True)
    LlamaConfig(
        hidden_size=s["hidden"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        num_key_value_heads=s["kv_heads"],
        intermediate_size=s["inter"],
        vocab_size=s["vocab"],
        max_position_embeddings=2048,
        tie_word_embeddings=s["tied"],
        dtype=dtype,
        architectures=["LlamaForCausalLM"],
    ).save_pretrained(dest)
    write_tokenizer(dest)
    kv = s["kv_heads"] * s["hidden"] // s["heads"]
    weight_map = {}
    g = torch.Generator().manual_seed(0)

    def rnd(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(dt)

    first = {
        "model.embed_tokens.weight": rnd(s["vocab"], s["hidden"]),
        "model.norm.weight": torch.ones(s["hidden"], dtype=dt),
    }
    if not s["tied"]:
        first["lm_head.weight"] = rnd(s["vocab"], s["hidden"])
    shards = [first]
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        shards.append(
            {
                p + "input_layernorm.weight": torch.ones(s["hidden"], dtype=dt),
                p + "post_attention_layernorm.weight": torch.ones(s["hidden"], dtype=dt),
                p + "self_attn.q_proj.weight": rnd(s["hidden"], s["hidden"]),
                p + "self_attn.k_proj.weight": rnd(kv, s["hidden"]),
                p + "self_attn.v_proj.weight": rnd(kv, s["hidden"]),
                p + "self_attn.o_proj.weight": rnd(s["hidden"], s["hidden"]),
                p + "mlp.gate_proj.weight": rnd(s["inter"], s["hidden"]),
                p + "mlp.up_proj.weight": rnd(s["inter"], s["hidden"]),
                p + "mlp.down_proj.weight": rnd(s["hidden"], s["inter"]),
            }
        )
    for n, shard in enumerate(shards):
        name = f"model-{n:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, dest / name)
        weight_map |= {k: name for k in shard}
    (dest / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return dest


def measure(model: str, out: Path, *extra: str, threads: int = 2) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        "-m",
        "trtserve.cli",
        "build",
        model,
        "-o",
        str(out),
        "--quiet",
        *extra,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", proc.stderr).group(1)
    secs = sum(float(x) * 60**i for i, x in enumerate(reversed(wall.split(":"))))
    engine_w = (out / "model.safetensors").stat().st_size
    all_w = engine_w + sum(p.stat().st_size for p in (out / "checkpoint").glob("rank*.safetensors"))
    return {
        "model": model,
        "build_s": round(secs, 1),
        "peak_rss_mib": round(rss_kb / 1024),
        "engine_weights_mib": round(engine_w / 2**20),
        "all_weights_mib": round(all_w / 2**20),
        "rss_over_engine_weights": round(rss_kb * 1024 / engine_w, 2),
        "rss_over_all_weights": round(rss_kb * 1024 / all_w, 2),
        "threads": threads,
        "cpu": f"{cpu_model()}, {os.cpu_count()} cores",
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/trtserve-measure"))
    ap.add_argument("--skip-tinyllama", action="store_true")
    ap.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of each build")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    t = args.threads
    rows = [
        measure("smollm2-135m", args.workdir / "smollm2-f32", "--quant", "none", threads=t),
        measure("smollm2-135m", args.workdir / "smollm2-bf16", "--dtype", "bfloat16", "--quant", "none", threads=t),
    ]
    if not args.skip_tinyllama:
        src = args.workdir / "tinyllama-src"
        if not (src / "model.safetensors.index.json").exists():
            make_tinyllama(src)
        rows.append(measure(str(src), args.workdir / "tinyllama-bf16", threads=t))
    for r in rows:
        print(json.dumps(r))
    shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
