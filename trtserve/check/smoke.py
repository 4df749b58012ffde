"""The `smoke` check: a tiny random twin of the config's model (check/twin.py) is built with the
config's settings (dtype, quant format, KV-cache format, group size, SmoothQuant alpha, tokens per
block, max_num_tokens, calibration text) and generates a few greedy tokens, in seconds on a CPU.

Unquantized: the engine's greedy tokens equal HF transformers' greedy generate on the twin; in
float32 token for token, in 16 bits up to a near-tie (at the first difference HF's logits of the
two tokens lie within 2% of its logit spread; after it the prefixes differ, so nothing later is
compared).

Quantized: ModelOpt's export, which the build converts, is not its fake-quant model bit for bit
(fused projections share one input scale, AWQ's scales are re-smoothed into the norms; see
tests/golden/test_quant_engine.py), and the engine quantizes SmoothQuant activations per token,
so equal tokens are not expected. The documented tolerance instead: over the prompts and the
engine's greedy tokens (teacher-forced), the engine's mean KL from the unquantized twin is at most
twice that of ModelOpt's fake-quant twin (same recipe, same calibration text) plus 0.001 nats;
i.e. the engine loses no more than ModelOpt's simulation of the format says it should. Where
ModelOpt cannot run a format's fake quant on a CPU (NVFP4's dynamic blocks need CUDA) the bound is
0.1 nats. And each greedy token is the engine's own prefill argmax up to a near-tie, so the decode
step and the quantized KV cache agree with the prefill.

Torch runs single-threaded here: a twin's matrices are too small for threads to pay, and on a
busy shared CPU extra threads only wait (ModelOpt's AWQ search: 18 s with 2 threads, 4.6 s with 1).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from trtserve.build.builder import build_engine
from trtserve.build.config import KEEP_GGUF, BuildConfig
from trtserve.build.planner import BuildPlan
from trtserve.build.source import open_checkpoint
from trtserve.check import reference as ref
from trtserve.check import twin
from trtserve.check.result import CheckFailed, Outcome, Skipped
from trtserve.check.settings import SmokeSettings

PROMPT_LEN = 24  # tokens; longer than twin.SLIDING_WINDOW
MAX_SEQ_LEN = 64  # >= PROMPT_LEN + SmokeSettings.tokens' largest
KV_CACHE_BYTES = 4 << 20  # the twin's KV cache: a few hundred KiB would do
KL_FACTOR, KL_SLACK, KL_NO_REFERENCE = 2.0, 1e-3, 0.1  # nats; see the module docstring


def check_smoke(plan: BuildPlan, settings: SmokeSettings, work: Path) -> Outcome:
    if plan.backend != "torch":
        raise Skipped(
            f"the {plan.backend} backend runs on a GPU with TensorRT-LLM; on this host the plan check covers it"
        )
    _need_transformers_model(plan)
    with _quiet_single_thread():
        cfg = plan.config
        if cfg.quant == KEEP_GGUF:  # the twin is a float HF checkpoint: no GGUF blocks to keep
            cfg = cfg.model_copy(update={"quant": None})
        twin_dir = twin.write_twin(plan.reader.hf_config, work / "twin", cfg.dtype, peaked=not cfg.quant)
        twin_cfg = twin_build_config(cfg, twin_dir, work)
        engine_dir = work / "engine"
        build_engine(twin_cfg, engine_dir, quiet=True)
        _check_same_features(plan, twin_dir)
        prompts = twin.prompts(settings.prompts, PROMPT_LEN)
        llm, ours = _generate(engine_dir, prompts, settings.tokens)
        if cfg.quant:
            return _compare_quantized(twin_dir, twin_cfg, llm, prompts, ours)
        return _compare_plain(twin_dir, cfg.dtype, prompts, ours)


def twin_build_config(cfg: BuildConfig, twin_dir: Path, work: Path) -> BuildConfig:
    """The config's settings, at the twin's sizes (tp 1: the torch engine runs unsharded; the plan
    check covers the tp split). Calibration defaults to the eval text, which the twin's byte-level
    tokenizer reads in milliseconds (the stdlib docstrings take seconds)."""
    calib = cfg.calib_data
    if cfg.quant and calib is None:
        from trtserve.runtime.eval_data import default_text

        calib = work / "calibration.txt"
        calib.write_text(default_text())
    return cfg.model_copy(
        update={
            "model": str(twin_dir),
            "tp_size": 1,
            "max_seq_len": MAX_SEQ_LEN,
            "max_batch_size": min(cfg.max_batch_size, 8),
            "max_num_tokens": min(cfg.max_num_tokens, 256),
            "calib_size": min(cfg.calib_size, 2),
            "calib_seq_len": min(cfg.calib_seq_len, 16),
            "calib_data": calib,
        }
    )


def _need_transformers_model(plan: BuildPlan) -> None:
    """The reference is HF transformers' model of the family; a family registered without one (a
    plugin's) has none to compare with."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    kind = getattr(plan.reader.hf_config, "model_type", None)
    if kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise Skipped(f"HF transformers has no causal LM for model_type {kind!r}, so there is no reference")


def _check_same_features(plan: BuildPlan, twin_dir: Path) -> None:
    """The twin must exercise the model's layer features; a difference is a bug in check/twin.py."""
    fam = plan.reader.family
    reader = open_checkpoint(str(twin_dir))
    have = fam.features_of(reader.family.model_config(reader.hf_config, plan.model.dtype))
    want = fam.features_of(plan.model)
    if have != want or reader.family.name != fam.name:
        raise AssertionError(f"the smoke twin of a {fam.name} model has features {sorted(have)}, not {sorted(want)}")


def _generate(engine_dir: Path, prompts: list[list[int]], n: int):
    from trtserve.engine.sampling import SamplingParams
    from trtserve.llm import LLM

    llm = LLM(engine_dir, kv_cache_memory=KV_CACHE_BYTES, device="cpu")
    outs = llm.generate(prompts, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
    return llm, [o.token_ids for o in outs]


def _compare_plain(twin_dir: Path, dtype: str, prompts: list[list[int]], ours: list[list[int]]) -> Outcome:
    tol = ref.NEAR_TIE_FLOAT32 if dtype == "float32" else ref.NEAR_TIE_16BIT
    model = ref.hf_model(twin_dir, dtype)
    ties = []
    for i, (prompt, mine) in enumerate(zip(prompts, ours, strict=True)):
        theirs, logits = ref.greedy(model, prompt, len(mine))
        div = ref.first_divergence(mine, theirs, logits, i, tol)
        if div is not None and not div.near_tie:
            raise CheckFailed(f"greedy tokens differ from HF transformers' beyond a near-tie: {div.describe()}")
        if div is not None:
            ties.append(div.describe())
    n = sum(len(o) for o in ours)
    if ties:
        return Outcome(f"{n} greedy tokens equal HF transformers' up to near-ties: {'; '.join(ties)}")
    return Outcome(f"{n} greedy tokens ({len(ours)} prompts) equal HF transformers' ({dtype})")


def _compare_quantized(twin_dir: Path, cfg: BuildConfig, llm, prompts, ours) -> Outcome:
    from trtserve.runtime.scorer import WindowScorer

    plain = ref.hf_model(twin_dir, cfg.dtype)
    fake = None if ref.fake_quant_needs_cuda(cfg) else ref.fake_quant_model(twin_dir, cfg)
    scorer = WindowScorer(llm.engine, MAX_SEQ_LEN)
    kl_engine = kl_fake = 0.0
    rows = 0
    for i, (prompt, mine) in enumerate(zip(prompts, ours, strict=True)):
        seq = prompt + mine
        engine = scorer.logits(seq, range(len(seq) - 1))  # (len - 1, vocab): row r predicts seq[r + 1]
        base = ref.teacher_forced(plain, seq)
        kl_engine += float(ref.kl_rows(base, engine).sum())
        if fake is not None:
            kl_fake += float(ref.kl_rows(base, ref.teacher_forced(fake, seq)).sum())
        rows += len(seq) - 1
        _check_decode_matches_prefill(engine, prompt, mine, i)
    kl_engine, kl_fake = kl_engine / rows, kl_fake / rows
    what = cfg.quant + (f" with a {cfg.kv_cache_quant} KV cache" if cfg.kv_cache_quant else "")
    if fake is None:
        bound = KL_NO_REFERENCE
        versus = f"(ModelOpt's fake quant of {cfg.quant} needs CUDA; bound {bound} nats)"
    else:
        bound = KL_FACTOR * kl_fake + KL_SLACK
        versus = f"vs {kl_fake:.2g} for ModelOpt's fake quant (bound {bound:.2g})"
    line = f"{what}: mean KL from the unquantized twin {kl_engine:.2g} nats/token {versus}"
    if kl_engine > bound:
        raise CheckFailed(f"{line}: the engine loses more than the format should")
    return Outcome(f"{line}; {sum(map(len, ours))} greedy tokens consistent with the prefill")


def _check_decode_matches_prefill(engine_logits, prompt: list[int], mine: list[int], index: int) -> None:
    """Each greedy token (decode step, KV cache) is the prefill's argmax there, up to a near-tie.
    The prefill is teacher-forced on the engine's own tokens, so every position has the same prefix
    on both paths and all of them are compared."""
    for j, token in enumerate(mine):
        row = engine_logits[len(prompt) - 1 + j]
        top = int(row.argmax())
        gap, spread = float(row[top] - row[token]), float(row.max() - row.min())
        div = ref.Divergence(index, j, token, top, gap, spread, ref.NEAR_TIE_16BIT)
        if not div.near_tie:
            raise CheckFailed(f"a greedy token is not the engine's own prefill argmax: {div.describe()}")


@contextlib.contextmanager
def _quiet_single_thread() -> Iterator[None]:
    """One torch thread (see the module docstring), and none of the twin's load logs or progress
    bars in the check's output."""
    import logging

    import torch
    from transformers.utils import logging as hf_logging

    threads, bars = torch.get_num_threads(), hf_logging.is_progress_bar_enabled()
    ours = logging.getLogger("trtserve")
    level = ours.level
    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()
    ours.setLevel(logging.WARNING)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        ours.setLevel(level)
        if bars:
            hf_logging.enable_progress_bar()
