"""The compute floor of a served workload: its matmul FLOPs at this machine's best GEMM rate.

On a few CPU cores a batch of mixed requests is compute-bound, so the fastest any engine could serve
it is (FLOPs of its matrix products) / (the rate this machine multiplies matrices at). `floor_tok_s`
is that limit in output tokens per second; a run's `fraction` of it says how far from the machine's
limit the engine is, independent of which peers were measured beside it.

What is counted (per layer, per token at context position c, in multiply-adds x 2):
    linears   2 x (hidden x (q + 2 kv) + q x hidden + hidden x 2 inter + inter x hidden)
    attention 2 x c x q (scores) + 2 x c x q (weighted values), c capped by a sliding window
and the lm_head (2 x hidden x vocab) once per sampled token: the engine computes logits only for the
positions it samples from. Elementwise work (norms, rotary, activations, softmax) is left out: it is
small against the GEMMs and does not run at the GEMM rate anyway.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from trtserve.engine.model_config import ModelConfig

GEMM_TOKENS = 512  # rows of the measured GEMMs: a prefill chunk


def linear_flops_per_token(cfg: ModelConfig) -> float:
    """Matmul FLOPs of one token through every layer's projections (not attention, not the lm_head)."""
    h, q, kv, inter = cfg.hidden_size, cfg.q_size, cfg.kv_size, cfg.intermediate_size
    per_layer = h * (q + 2 * kv) + q * h + h * 2 * inter + inter * h
    return 2.0 * per_layer * cfg.num_hidden_layers


def attention_flops(cfg: ModelConfig, start: int, end: int) -> float:
    """Scores and weighted values of the tokens at positions [start, end), each over its context (the keys
    within its layer's window)."""
    total = 0
    for window, layers in cfg.kv_layer_kinds().items():
        if window:
            contexts = sum(min(p + 1, window) for p in range(start, end))
        else:  # sum of (p + 1) for p in [start, end)
            contexts = (end * (end + 1) - start * (start + 1)) // 2
        total += contexts * layers
    return 4.0 * cfg.q_size * total


def request_flops(cfg: ModelConfig, prompt_len: int, output_len: int) -> float:
    """One request: its prompt prefilled, then output_len - 1 decode steps; one logits row per sampled token."""
    tokens = prompt_len + max(output_len - 1, 0)  # positions that go through the layers
    head = 2.0 * cfg.hidden_size * cfg.vocab_size * output_len
    return tokens * linear_flops_per_token(cfg) + attention_flops(cfg, 0, tokens) + head


def workload_flops(cfg: ModelConfig, requests: Iterable[tuple[int, int]]) -> float:
    """(prompt tokens, output tokens actually served) per request -> total matmul FLOPs."""
    return sum(request_flops(cfg, p, o) for p, o in requests)


def gemm_shapes(cfg: ModelConfig) -> list[tuple[int, int, int]]:
    """(tokens, in, out) of the model's projections at a prefill chunk of GEMM_TOKENS rows."""
    h, q, kv, inter = cfg.hidden_size, cfg.q_size, cfg.kv_size, cfg.intermediate_size
    return [(GEMM_TOKENS, h, q + 2 * kv), (GEMM_TOKENS, q, h), (GEMM_TOKENS, h, 2 * inter), (GEMM_TOKENS, inter, h)]


def measure_gemm_rate(cfg: ModelConfig, dtype: str | None = None, reps: int = 5, device: str | None = None) -> float:
    """FLOP/s: the best rate over the model's own projection shapes, in the model's dtype (or `dtype`),
    with torch's current thread count, of `torch.mm` and, for float32 on CPU, oneDNN's linear (which the
    engine's prompts run on where MKL runs slower code: kernels/dense.py). Run it in the same process and
    run as the workload it is compared with. `device` defaults to the one the torch engine picks (CUDA
    where present: trtserve/runtime/loader.py), each product timed to its end there."""
    import torch

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))  # as runtime/loader.py
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    dt = getattr(torch, dtype or cfg.dtype)  # float32 | bfloat16 | float16 (ModelConfig.dtype's names)
    onednn = (
        dev.type == "cpu"
        and dt == torch.float32
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )
    best = 0.0
    for t, k, n in gemm_shapes(cfg):
        a = torch.randn(t, k, dtype=torch.float32).to(dev, dt)  # (tokens, in)
        b = torch.randn(k, n, dtype=torch.float32).to(dev, dt)  # (in, out)
        products = [lambda a=a, b=b: torch.mm(a, b)]
        if onednn:
            w = b.t().contiguous()  # (out, in), as the engine stores it
            products.append(lambda a=a, w=w: torch.ops.mkldnn._linear_pointwise(a, w, None, "none", [], ""))
        for product in products:
            product()  # warm-up: first-call allocation and dispatch
            sync()
            for _ in range(reps):
                t0 = time.perf_counter()
                product()
                sync()
                best = max(best, 2.0 * t * k * n / (time.perf_counter() - t0))
    return best


@dataclass(frozen=True)
class Floor:
    flops: float  # the workload's matmul FLOPs
    gemm_flop_s: float  # the machine's measured GEMM rate
    output_tokens: int  # tokens the run served
    achieved_tok_s: float  # the run's output tokens / s

    @property
    def floor_tok_s(self) -> float:
        """Output tokens/s if every FLOP ran at the GEMM rate and nothing else took time."""
        return self.output_tokens * self.gemm_flop_s / self.flops if self.flops else 0.0

    @property
    def fraction(self) -> float:
        return self.achieved_tok_s / self.floor_tok_s if self.floor_tok_s else 0.0

    def as_dict(self) -> dict:
        return {
            "workload_tflop": self.flops / 1e12,
            "gemm_gflop_s": self.gemm_flop_s / 1e9,
            "floor_output_tok_s": self.floor_tok_s,
            "achieved_output_tok_s": self.achieved_tok_s,
            "fraction_of_floor": self.fraction,
        }

    def line(self) -> str:
        return (
            f"floor: {self.flops / 1e12:.2f} TFLOP of matmuls at {self.gemm_flop_s / 1e9:.1f} GFLOP/s = "
            f"{self.floor_tok_s:.1f} output tok/s; served {self.achieved_tok_s:.1f} = {self.fraction:.2f} of the floor"
        )


def of_run(cfg: ModelConfig, run, gemm_flop_s: float) -> Floor:
    """The floor of a finished BenchRun (trtserve/bench/client.py): the tokens its successful requests
    were actually served, against `gemm_flop_s` measured in the same run."""
    done = [r for r in run.results if r.success]
    out = sum(r.output_tokens for r in done)
    duration = run.duration if run.duration > 0 else float("inf")
    return Floor(workload_flops(cfg, [(r.prompt_len, r.output_tokens) for r in done]), gemm_flop_s, out, out / duration)
