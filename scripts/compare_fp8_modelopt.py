"""FP8 on SmolLM2-135M: the torch engine's FP8 engines against NVIDIA ModelOpt's own fake-quantized
HF transformers model, scored with `trtserve eval`'s strided-perplexity recipe on the same text.

    .venv/bin/python scripts/compare_fp8_modelopt.py [--work /tmp/fp8-compare] [--threads 2]

Builds (or reuses, under --work) bf16, fp8 and fp8_pcpt engines of MODEL (`trtserve build MODEL
--dtype bfloat16 [--quant ...]`, default calibration), loads MODEL as a bf16 transformers model with
trtserve's own reader, and fake-quantizes copies of it with `mtq.quantize`, calibrated on the
windows the build calibrates on: FP8 as the build asks (`FP8_DEFAULT_CFG`, trtserve's recipe),
that recipe with per-channel weight scales or with per-token activation scales, and
`FP8_PER_CHANNEL_PER_TOKEN_CFG`; the FP8 model also with only its weight or only its activation
quantizers on, with the weights of its HF export, and (as the bf16 model) with embeddings moved by
about one bf16 rounding step, which shows how far rounding noise alone moves a model.

Every model scores the same windows (trtserve/runtime/evaluate.py: tokens, windows, scored rows);
each row is compared with the bf16 model of its own implementation (engine rows with the bf16
engine, ModelOpt rows with the bf16 HF model), and the last rows compare each engine with
ModelOpt's model of the same format. The delta's standard error is that of the mean per-token
log-likelihood difference (tokens taken as independent).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

# engine dir name -> --quant (none: unquantized, a GGUF dequantized)
ENGINES = {"bf16": "none", "fp8": "fp8", "fp8_pcpt": "fp8_pcpt"}
ROW_CHUNK = 128  # positions whose float64 log-probabilities are held at once (rows x vocab)
Scorer = Callable[[list[int], list[int]], torch.Tensor]  # (window tokens, rows) -> (rows, vocab) logits


@dataclass
class Totals:
    """Sums over scored positions of one model against one reference."""

    nll: float = 0.0
    diff_sq: float = 0.0  # squared per-position differences of nll from the reference's, for the delta's error
    kl: float = 0.0  # KL(reference || model), nats
    agree: int = 0  # positions with the reference's argmax
    count: int = 0


def build_engines(model: str, work: Path) -> dict[str, Path]:
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    dirs = {}
    for name, quant in ENGINES.items():
        dest = dirs[name] = work / name
        if not (dest / "manifest.json").exists():
            print(f"building {dest}", flush=True)
            cfg = BuildConfig(model=model, dtype="bfloat16", max_seq_len=2048, quant=quant)
            build_engine(cfg, dest, force=True, quiet=True)
    return dirs


def modelopt_models(model: str, architecture: str, tokenizer) -> dict[str, torch.nn.Module]:
    """The bf16 HF model and its ModelOpt fake-quantized variants, calibrated as `trtserve build` does."""
    from trtserve.build.config import BuildConfig
    from trtserve.build.source import open_checkpoint
    from trtserve.quant import modelopt_driver as mo
    from trtserve.quant.calibration import calibration_batches

    with _quiet():
        import modelopt.torch.quantization as mtq

    base = mo.load_hf_model(open_checkpoint(model), architecture, torch.bfloat16)
    defaults = BuildConfig()
    batches = calibration_batches(tokenizer, None, defaults.calib_size, defaults.calib_seq_len)

    def calibrate(m: torch.nn.Module) -> None:
        for ids in batches:
            m(ids)

    def quantized(cfg: dict, loop: Callable | None) -> torch.nn.Module:
        m = copy.deepcopy(base)
        with _quiet(), torch.no_grad():
            mtq.quantize(m, cfg, loop)
        return m

    fp8_cfg = mo.modelopt_config("fp8", None)  # the recipe `trtserve build --quant fp8` runs
    per_channel_cfg = copy.deepcopy(fp8_cfg)
    for entry in per_channel_cfg["quant_cfg"]:
        if entry["quantizer_name"] == "*weight_quantizer":
            entry["cfg"]["axis"] = 0  # one scale per output channel, as FP8_PER_CHANNEL_PER_TOKEN_CFG's
    per_token_cfg = copy.deepcopy(fp8_cfg)
    pcpt_cfg = mo.modelopt_config("fp8_pcpt", None)
    for entry, pcpt in zip(per_token_cfg["quant_cfg"], pcpt_cfg["quant_cfg"], strict=True):
        if entry["quantizer_name"] == "*input_quantizer":
            entry["cfg"] = pcpt["cfg"]  # dynamic, one scale per token
    fp8 = quantized(fp8_cfg, calibrate)
    return {
        "bf16": base,
        "fp8": fp8,
        "fp8, its export's weights": _with_export_weights(fp8, mo),
        "fp8 weights only": _with_only(fp8, "weight_quantizer"),
        "fp8 activations only": _with_only(fp8, "input_quantizer"),
        "fp8 per-channel weights": quantized(per_channel_cfg, calibrate),
        "fp8 per-token activations": quantized(per_token_cfg, None),  # dynamic; weights need no data
        "fp8_pcpt": quantized(pcpt_cfg, None),
        "bf16, perturbed": _perturbed(base),
        "fp8, perturbed": _perturbed(fp8),
    }


def _perturbed(model: torch.nn.Module) -> torch.nn.Module:
    """A copy whose embedding rows move by about one bf16 rounding step (a seeded relative 2^-9 x
    N(0, 1)): as far apart as two implementations' roundings, to show how far that alone moves a model."""
    m = copy.deepcopy(model)
    emb = m.get_input_embeddings().weight
    noise = torch.randn(emb.shape, generator=torch.Generator().manual_seed(0)) * 2**-9
    with torch.no_grad():
        emb.copy_(emb.float() * (1 + noise))
    return m


def _with_export_weights(model: torch.nn.Module, mo) -> torch.nn.Module:
    """A copy of a fake-quantized FP8 model whose weights are those of ModelOpt's HF export (e4m3 x
    weight_scale: what trtserve converts and TensorRT-LLM runs) instead of its own fake-quant rounding."""
    import tempfile

    from trtserve.quant.build import read_export

    with tempfile.TemporaryDirectory() as tmp, _quiet():
        mo.export(model, next(model.parameters()).dtype, Path(tmp))
        t = read_export(Path(tmp))
    m = copy.deepcopy(model)
    with torch.no_grad():
        for name, mod in m.named_modules():
            if name + ".weight_scale" in t:
                w, scale = t[name + ".weight"].float(), t[name + ".weight_scale"].float()
                mod.weight.copy_(w * (scale if scale.dim() == 0 else scale[:, None]))
                mod.weight_quantizer.disable()
    return m


def _with_only(model: torch.nn.Module, kept: str) -> torch.nn.Module:
    """A copy of a fake-quantized model with every quantizer but those named `kept` turned off."""
    m = copy.deepcopy(model)
    for name, mod in m.named_modules():
        if name.endswith(("weight_quantizer", "input_quantizer")) and not name.endswith(kept):
            mod.disable()
    return m


def hf_scorer(model: torch.nn.Module) -> Scorer:
    def logits(tokens: list[int], rows: list[int]) -> torch.Tensor:
        with torch.inference_mode():
            return model(torch.tensor([tokens])).logits[0, rows].float()  # (rows, vocab)

    return logits


def compare(logits: torch.Tensor, ref: torch.Tensor, targets: torch.Tensor, t: Totals) -> None:
    """Add one window's scored positions (logits, ref: (n, vocab); targets (n,)) to t."""
    for lo in range(0, len(targets), ROW_CHUNK):
        q = F.log_softmax(logits[lo : lo + ROW_CHUNK].double(), dim=-1)  # float64: KLs far below float32's step
        p = F.log_softmax(ref[lo : lo + ROW_CHUNK].double(), dim=-1)
        scored = targets[lo : lo + ROW_CHUNK, None]  # (chunk, 1)
        nll = -q.gather(1, scored)
        t.nll += float(nll.sum())
        t.diff_sq += float(((nll + p.gather(1, scored)) ** 2).sum())
        t.kl += float(F.kl_div(q, p, log_target=True, reduction="none").sum())
        t.agree += int((p.argmax(-1) == q.argmax(-1)).sum())
        t.count += len(q)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m", help="HF dir, GGUF file or alias [smollm2-135m]")
    ap.add_argument("--work", type=Path, default=Path("/tmp/fp8-compare"), help="engine dirs, reused")
    ap.add_argument("--data", type=Path, help="TXT or JSONL to score [trtserve eval's built-in text]")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--stride", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from trtserve.runtime import eval_data
    from trtserve.runtime.evaluate import windows
    from trtserve.runtime.loader import load_engine
    from trtserve.runtime.scorer import WindowScorer

    start = time.perf_counter()
    dirs = build_engines(args.model, args.work)
    engines = {name: load_engine(d, "cpu") for name, d in dirs.items()}
    ref_engine = engines["bf16"]
    tokenizer = ref_engine.tokenizer
    print("fake-quantizing with ModelOpt", flush=True)
    hf = modelopt_models(args.model, ref_engine.config.pretrained_config.architecture, tokenizer)
    text = eval_data.read_text(args.data) if args.data else eval_data.default_text()
    ids = eval_data.tokenize(tokenizer, text, None)
    wins = windows(len(ids), args.seq_len, args.stride)

    scorers = {("engine", n): WindowScorer(e, args.seq_len).logits for n, e in engines.items()}
    scorers |= {("ModelOpt", n): hf_scorer(m) for n, m in hf.items()}
    # (model, reference): every model against its own implementation's bf16; engines against ModelOpt.
    pairs = [(k, (k[0], "bf16")) for k in scorers]
    pairs += [(("engine", n), ("ModelOpt", n)) for n in ENGINES]
    pairs += [(("engine", "fp8"), ("ModelOpt", "fp8, its export's weights"))]
    totals = {pair: Totals() for pair in pairs}
    for i, w in enumerate(wins):
        tokens, rows = ids[w.begin : w.end], list(w.rows)
        targets = torch.tensor(ids[w.first : w.end])  # (n,)
        logits = {k: s(tokens, rows) for k, s in scorers.items()}  # each (n, vocab) float32
        for (k, r), t in totals.items():
            compare(logits[k], logits[r], targets, t)
        print(f"window {i + 1}/{len(wins)}", flush=True)
    report(totals, len(ids), wins, args, time.perf_counter() - start)


def report(totals: dict, tokens: int, wins: list, args, seconds: float) -> None:
    n = next(iter(totals.values())).count
    print(
        f"\n{args.model}, {args.data or 'the built-in text'}: {tokens} tokens, {n} scored, {len(wins)} windows "
        f"of {args.seq_len} (stride {args.stride}), {args.threads} threads, {seconds:.0f} s\n"
    )
    print("| model | against | perplexity | delta (standard error) | top-1 agreement | mean KL (nats) |")
    print("|---|---|---|---|---|---|")
    for (k, r), t in totals.items():
        ppl = math.exp(t.nll / t.count)
        ref_ppl = math.exp(totals[(r, (r[0], "bf16"))].nll / t.count)
        delta = 100 * (ppl - ref_ppl) / ref_ppl
        mean = math.log(ppl / ref_ppl)  # the mean per-position nll difference
        stderr = 100 * (ppl / ref_ppl) * math.sqrt(max(t.diff_sq / t.count - mean**2, 0) / (t.count - 1))
        print(
            f"| {k[0]} {k[1]} | {r[0]} {r[1]} | {ppl:.3f} | {delta:+.2f}% ({stderr:.2f}) | {t.agree / t.count:.3f} | "
            f"{t.kl / t.count:.5f} |"
        )


@contextlib.contextmanager
def _quiet():
    """ModelOpt prints its quantizer summary to stdout and warns about untested transformers versions."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


if __name__ == "__main__":
    main()
