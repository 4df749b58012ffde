"""The references a smoke run compares the engine with, and the comparisons (check/smoke.py says
which applies when and why)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from trtserve.build.config import BuildConfig

NEAR_TIE_16BIT = 0.02  # of the logit spread: 16-bit rounding alone moves logits this much
NEAR_TIE_FLOAT32 = 0.001  # float32 differs only in summation order


@dataclass(frozen=True)
class Divergence:
    prompt: int  # index of the prompt
    position: int  # index of the generated token
    ours: int
    theirs: int
    gap: float  # the reference's logit of its token minus that of ours
    spread: float  # the reference's max - min logit there
    tolerance: float  # share of the spread within which the two tokens count as tied

    @property
    def near_tie(self) -> bool:
        return self.gap <= self.tolerance * self.spread

    def describe(self) -> str:
        return (
            f"prompt {self.prompt}, token {self.position}: engine {self.ours}, reference {self.theirs} "
            f"(logit gap {self.gap:.3g} = {self.gap / self.spread:.1%} of the spread)"
        )


def hf_model(twin_dir: Path, dtype: str):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(twin_dir), dtype=getattr(torch, dtype)).eval()


def fake_quant_model(twin_dir: Path, cfg: BuildConfig):
    """ModelOpt's fake-quantized twin: the recipe, calibration text and settings the build used."""
    from rich.console import Console
    from transformers import AutoTokenizer

    from trtserve.build.source import open_checkpoint
    from trtserve.quant import modelopt_driver as mo

    reader = open_checkpoint(str(twin_dir))
    model = mo.load_hf_model(reader, reader.family.hf_architectures[0], getattr(torch, cfg.dtype))
    tokenizer = AutoTokenizer.from_pretrained(str(twin_dir))
    return mo.quantize(model, tokenizer, cfg, Console(quiet=True), quiet=True)


def fake_quant_needs_cuda(cfg: BuildConfig) -> bool:
    """ModelOpt 0.47 runs dynamic block quantizers (NVFP4's) on CUDA tensors only; read from the
    recipe the build uses, so a format's needs are not listed here."""
    from trtserve.check.memory import quant_recipe

    for entry in quant_recipe(cfg)["quant_cfg"]:
        stages = entry.get("cfg") or {}
        for stage in stages if isinstance(stages, list) else [stages]:
            if (stage.get("block_sizes") or {}).get("type") == "dynamic" and entry.get("enable", True):
                return True
    return False


def greedy(model, prompt: list[int], n: int) -> tuple[list[int], list[torch.Tensor]]:
    """HF transformers' greedy generate, never stopping at EOS: the tokens and each step's logits."""
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            output_logits=True,
            return_dict_in_generate=True,
        )
    return out.sequences[0, len(prompt) :].tolist(), [step[0].float() for step in out.logits]


def first_divergence(
    ours: list[int], theirs: list[int], logits: list[torch.Tensor], prompt: int, tolerance: float
) -> Divergence | None:
    """Where two greedy sequences first differ, with the reference's logits there (its step's)."""
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if a != b:
            row = logits[i]
            gap = float(row[b] - row[a])
            return Divergence(prompt, i, a, b, gap, float(row.max() - row.min()), tolerance)
    return None


def teacher_forced(model, tokens: list[int]) -> torch.Tensor:
    """(len(tokens) - 1, vocab) float32 logits: row r predicts tokens[r + 1]."""
    with torch.inference_mode():
        return model(torch.tensor([tokens])).logits[0, :-1].float()


def kl_rows(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """Per-row KL(p || q) in nats, (rows,)."""
    p = F.log_softmax(p_logits.double(), dim=-1)
    q = F.log_softmax(q_logits.double(), dim=-1)
    return (p.exp() * (p - q)).sum(-1)
