"""The `full` check (--level full): build the real model as the config says, score it with
`trtserve eval` (runtime/evaluate.py, its built-in text) against the engine of the config that
`checks.expect.reference` names, and hold the result to `checks.expect`'s thresholds.

Only torch engines are scored (eval runs the torch engine); the TensorRT-LLM backends build on a
GPU host, where tests/gpu compares them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.check.result import CheckFailed, Outcome, Skipped
from trtserve.check.settings import Expect


def check_full(cfg: BuildConfig, expect: Expect | None, engine_dir: Path, reference: Callable[[Path], Path]) -> Outcome:
    """reference(config path) -> its built engine dir (built once per run, however many configs name it)."""
    from trtserve.runtime.evaluate import evaluate

    if cfg.backend != "torch":
        raise Skipped(f"full builds and scores torch engines; a {cfg.backend} engine is built on its GPU host")
    expect = expect or Expect()
    build_engine(cfg, engine_dir, force=True, quiet=True)
    ref_dir = reference(expect.reference) if expect.reference is not None else None
    result = evaluate(engine_dir, ref_dir, max_tokens=expect.eval_tokens)
    measured = [f"perplexity {result.perplexity:.3f} on {result.scored_tokens} tokens"]
    failed = []
    if expect.max_perplexity is not None and result.perplexity > expect.max_perplexity:
        failed.append(f"perplexity {result.perplexity:.3f} > max_perplexity {expect.max_perplexity}")
    if ref_dir is not None:
        delta, agree = result.perplexity_delta_pct, result.top1_agreement
        measured.append(f"{delta:+.2f}% vs the reference, top-1 agreement {agree:.3f}")
        if expect.perplexity_delta_pct is not None and delta > expect.perplexity_delta_pct:
            failed.append(f"perplexity delta {delta:+.2f}% > {expect.perplexity_delta_pct}%")
        if expect.top1_agreement is not None and agree < expect.top1_agreement:
            failed.append(f"top-1 agreement {agree:.3f} < {expect.top1_agreement}")
    if failed:
        raise CheckFailed("; ".join(failed) + f" ({', '.join(measured)})")
    return Outcome(", ".join(measured) + ("" if expect != Expect() else "; no `checks.expect` thresholds set"))
