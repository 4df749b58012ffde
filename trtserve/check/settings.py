"""A check config: the YAML `trtserve build --config` takes, plus `target:` and a `checks:` block.

    model: smollm2-135m          # every BuildConfig key (build/config.py), validated the same way
    quant: w8a16
    target: l4-24gb              # a preset of check/targets.py or a size (24GiB); --target wins
    checks:
      skip: [smoke]              # checks not to run for this config (reported as skipped)
      lock: configs/ci/x.lock    # the engine.lock to compare with (--lock wins)
      smoke: {prompts: 2, tokens: 8}
      expect:                    # --level full: thresholds on `trtserve eval`
        reference: configs/ci/smollm2-float32.yaml   # a check config of the same model
        perplexity_delta_pct: 5  # at most, against the reference
        top1_agreement: 0.9      # at least, against the reference
        max_perplexity: 30       # at most
        eval_tokens: 1024        # of the eval text

Paths are relative to the working directory, as in `trtserve build --config`. Problems are one
sentence each; an unknown key or value names the nearest known one ("did you mean").
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trtserve.build.config import BuildConfig
from trtserve.check.targets import Target, resolve_target

CHECKS = ("schema", "support", "plan", "memory", "smoke", "full", "lock")  # in the order they run and report
Skippable = Literal["support", "plan", "memory", "smoke", "full", "lock"]


class SmokeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompts: int = Field(2, ge=1, le=8)  # seeded random prompts
    tokens: int = Field(8, ge=1, le=32)  # greedy tokens each


class Expect(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reference: Path | None = None  # a check config (its build part) of the unquantized model
    perplexity_delta_pct: float | None = Field(None, ge=0)  # at most: 100 * (ppl - ref) / ref
    top1_agreement: float | None = Field(None, ge=0, le=1)  # at least: share of positions, same argmax
    max_perplexity: float | None = Field(None, gt=0)  # at most
    eval_tokens: int = Field(1024, ge=16)  # tokens of the eval text scored

    @model_validator(mode="after")
    def _reference_for_comparisons(self) -> Expect:
        if self.reference is None and (self.perplexity_delta_pct is not None or self.top1_agreement is not None):
            raise ValueError("perplexity_delta_pct and top1_agreement compare with a reference; add `reference:`")
        return self


class ChecksBlock(BaseModel):
    model_config = ConfigDict(extra="forbid")

    skip: list[Skippable] = []
    lock: Path | None = None
    smoke: SmokeSettings = SmokeSettings()
    expect: Expect | None = None


class CheckConfig(BuildConfig):
    """A build config with the check's own keys."""

    target: str | int | None = None
    checks: ChecksBlock = ChecksBlock()

    @field_validator("target")
    @classmethod
    def _known_target(cls, v: str | int | None) -> str | int | None:
        if v is not None:
            resolve_target(v)  # ValueError: pydantic reports it as this field's problem
        return v

    def build_config(self) -> BuildConfig:
        return BuildConfig.model_validate(self.model_dump(exclude=set(CHECK_KEYS), exclude_unset=True))


CHECK_KEYS = tuple(CheckConfig.model_fields.keys() - BuildConfig.model_fields.keys())  # what `build --config` drops


def validate(data: dict) -> tuple[CheckConfig | None, list[str]]:
    """The validated config, or None and one sentence per problem."""
    try:
        return CheckConfig.model_validate(data), []
    except ValidationError as err:
        return None, [_problem(e) for e in err.errors()]


def effective_target(cfg: CheckConfig, override: str | None) -> Target | None:
    value = override if override is not None else cfg.target
    return None if value is None else resolve_target(value)


def _problem(e: dict) -> str:
    loc = [str(p) for p in e["loc"]]
    key = ".".join(loc) or "config"
    if e["type"] == "extra_forbidden":
        known = _keys_at(CheckConfig, loc[:-1])
        return f"unknown key '{key}'{_did_you_mean(loc[-1], known)} (known here: {', '.join(known)})"
    if e["type"] == "literal_error":
        allowed = re.findall(r"'([^']*)'", e["ctx"].get("expected", "")) if e.get("ctx") else []
        return f"'{key}': {e['input']!r} is not one of {', '.join(allowed)}{_did_you_mean(str(e['input']), allowed)}"
    msg = e["msg"].removeprefix("Value error, ")
    return f"'{key}': {msg}"


def _did_you_mean(word: str, candidates: list[str]) -> str:
    near = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return f"; did you mean '{near[0]}'?" if near else ""


def _keys_at(model: type[BaseModel], path: list[str]) -> list[str]:
    """The keys the model nested at `path` (through sub-model fields and list indexes) takes."""
    for part in path:
        field = model.model_fields.get(part)
        if field is None:
            break  # a list index: stay on the item's model
        sub = [a for a in (field.annotation, *get_args(field.annotation)) if isinstance(a, type)]
        models = [a for a in sub if issubclass(a, BaseModel)]
        if not models:
            return []
        model = models[0]
    return list(model.model_fields)
