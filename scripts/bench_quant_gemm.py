"""Prefill GEMM rate of every quantized linear (models/quantized.py) in every activation dtype, as a
fraction of the dense GEMM of the same shape and dtype, measured interleaved in one run.

    .venv/bin/python scripts/bench_quant_gemm.py [--threads 2] [--tokens 512] [--shape 576x1536]

Issue 21's target: every format x dtype at >= 0.5 of the dense rate at prefill sizes. Random weights
in each format's storage (what `trtserve build --quant` writes), so no model or calibration is needed.
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import torch
import torch.nn.functional as F

from trtserve.kernels.native import cpu_model
from trtserve.models.quant_formats import QUANT_FORMATS
from trtserve.models.quantized import make_linear

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def tensors(algo: str, n: int, k: int, group: int) -> dict[str, torch.Tensor]:
    """Random tensors of one linear in `algo`'s engine layout (trtserve/quant/convert.py)."""
    i8 = lambda *s: torch.randint(-127, 128, s, dtype=torch.int8)  # noqa: E731
    if algo == "W8A16":
        return {"weight": i8(n, k), "weights_scaling_factor": torch.rand(n) / 100}
    if algo in ("W4A16_AWQ", "W4A8_AWQ"):
        t = {"weight": i8(n // 2, k), "weights_scaling_factor": torch.rand(n, k // group) / 10}
        if algo == "W4A8_AWQ":
            t |= {"activation_scaling_factor": torch.tensor([0.01]), "weights_scaling_factor_2": torch.tensor([0.002])}
        return t
    if algo == "W8A8_SQ_PER_CHANNEL":
        return {"weight": i8(n, k), "weights_scaling_factor": torch.rand(n) / 100}
    if algo.startswith("FP8"):
        w = (torch.randn(n, k) * 50).to(torch.float8_e4m3fn)
        if algo == "FP8":
            return {
                "weight": w,
                "weights_scaling_factor": torch.tensor([0.01]),
                "activation_scaling_factor": torch.tensor([0.02]),
            }
        return {"weight": w, "per_channel_scale": torch.rand(n) / 100}
    if algo == "NVFP4":
        return {
            "weight": torch.randint(0, 256, (n, k // 2), dtype=torch.uint8),
            "weights_scaling_factor": (torch.rand(n, k // 16) + 0.5).to(torch.float8_e4m3fn),
            "weights_scaling_factor_2": torch.tensor([0.01]),
        }
    raise KeyError(algo)


def seconds(fn, reps: int) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--shape", default="576x1536", help="IN x OUT of the linear [SmolLM2's gate/up: 576x1536]")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    k, n = (int(v) for v in a.shape.split("x"))
    print(f"{cpu_model()}, {a.threads} threads, torch {torch.__version__}, x ({a.tokens}, {k}) @ W ({n}, {k})^T")
    flops = 2.0 * a.tokens * k * n
    for dname, dt in DTYPES.items():
        x = torch.randn(a.tokens, k).to(dt)
        wd = torch.randn(n, k).to(dt)
        for algo, spec in QUANT_FORMATS.items():
            group = next(g for g in (spec.block, 64, 32, 16) if k % g == 0)  # int4 groups must divide IN
            lin = make_linear(tensors(algo, n, k, group), algo, dt, group)
            dense = seconds(partial(F.linear, x, wd), a.reps)  # interleaved: the same moment's machine
            quant = seconds(partial(lin, x), a.reps)
            print(
                f"{dname:9s} {algo:26s} dense {flops / dense / 1e9:7.1f} GFLOP/s  quantized {flops / quant / 1e9:7.1f}"
                f"  ratio {dense / quant:5.2f}"
            )


if __name__ == "__main__":
    main()
