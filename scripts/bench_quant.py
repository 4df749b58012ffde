"""Batch-1 decode speed of quantized torch engines against the bf16 engine of the same model.

    .venv/bin/python scripts/bench_quant.py [--src /tmp/tl-src] [--out /tmp/bench-quant] [--threads 2]

Builds (or reuses) a bf16, a float32, a w8a16 and a w4a16 engine of SRC (an HF dir; scripts/measure_build.py
has `make_tinyllama(Path)` for a random TinyLlama-1.1B-shaped one), then for each measures one
prompt of 128 tokens decoding 65 tokens (greedy, ignore_eos) minus the same prompt decoding 1, so
prefill is excluded: decode tokens/s = 64 / (t65 - t1), best of 3. One run, one thread count,
printed with the resident weight bytes and the ratio to bf16 measured in the same run.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

# bf16 is the baseline; float32 is shown too because CPUs without AVX512-BF16 / AMX (this
# one: AVX2) emulate bf16 matmuls, which makes bf16 the slowest way to run the unquantized model.
FORMATS = ("bf16", "float32", "w8a16", "w4a16")


def build(src: Path, out: Path, fmt: str) -> Path:
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    dest = out / fmt
    if not (dest / "manifest.json").exists():
        quant = None if fmt in ("bf16", "float32") else fmt
        dtype = "float32" if fmt == "float32" else "bfloat16"
        build_engine(BuildConfig(model=str(src), dtype=dtype, max_seq_len=1024, quant=quant), dest, force=True)
    return dest


def decode_rate(engine_dir: Path, prompt: list[int], new: int = 64, repeats: int = 3) -> float:
    from trtserve import LLM, SamplingParams

    llm = LLM(engine_dir, kv_cache_memory=256 << 20, enable_prefix_caching=False)

    def timed(n: int) -> float:
        t = time.perf_counter()
        llm.generate([prompt], SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
        return time.perf_counter() - t

    timed(4)  # warm-up
    best = min(timed(new + 1) - timed(1) for _ in range(repeats))
    return new / best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", type=Path, default=Path("/tmp/tl-src"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench-quant"))
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    prompt = torch.randint(3, 30000, (128,), generator=torch.Generator().manual_seed(0)).tolist()
    rows = []
    for fmt in FORMATS:
        d = build(args.src, args.out, fmt)
        size = (d / "model.safetensors").stat().st_size
        rows.append((fmt, size, decode_rate(d, prompt)))
        print(f"{fmt}: {rows[-1][2]:.2f} tokens/s", flush=True)
    base, f32 = rows[0][2], rows[1][2]
    print(f"\nbatch-1 decode, {args.threads} thread(s), torch {torch.__version__}, source {args.src}")
    print(f"{'format':8} {'weights MiB':>12} {'tokens/s':>9} {'vs bf16':>8} {'vs f32':>7}")
    for fmt, size, rate in rows:
        print(f"{fmt:8} {size / 2**20:12.0f} {rate:9.2f} {rate / base:7.2f}x {rate / f32:6.2f}x")


if __name__ == "__main__":
    main()
