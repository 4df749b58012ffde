"""LoRA adapters in the contract: their identity, the engine option that serves them, and PEFT's config.

An adapter is named by an `AdapterRef`: the name a client selects it by and the sha256 of its files.
The hash, not the name, is what prefix-cache keys and receipts record: an adapter reloaded under the
same name with other weights is another adapter, and never reuses the old one's cached prefixes.

An adapter dir is PEFT's format: `adapter_config.json` (read here, without torch) and
`adapter_model.safetensors` (read by the backend that applies it: trtserve/models/lora.py for torch).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trtserve.engine.errors import UserError
from trtserve.engine.hashing import fingerprint

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")  # a model name on /v1 and /v2: no "/" or spaces


@dataclass(frozen=True, slots=True)
class AdapterRef:
    """One adapter's identity: `name` selects it, `content_hash` ("sha256:...", of its two files) is it."""

    name: str
    content_hash: str

    def __str__(self) -> str:
        return f"{self.name}@{self.content_hash[:19]}"


def adapter_ref(name: str, path: str | Path) -> AdapterRef:
    """The ref of the PEFT adapter at `path` under `name`; UserError when the dir is not one."""
    check_adapter_name(name)
    files = adapter_files(Path(path))
    return AdapterRef(name, fingerprint(files))


def check_adapter_name(name: str) -> None:
    if problem := _name_problem(name):
        raise UserError(problem)


def _name_problem(name: str) -> str | None:
    if _NAME.match(name):
        return None
    return (
        f"adapter name {name!r} is not usable as a model name; use letters, digits, '.', '_', ':' or '-' "
        "(no '/' or spaces, at most 128 characters)"
    )


def adapter_files(path: Path) -> dict[str, Path]:
    """The adapter dir's two files by name; UserError naming what is missing and how to make it."""
    if not path.is_dir():
        raise UserError(f"LoRA adapter {path} is not a directory; give the dir PEFT's save_pretrained wrote")
    files = {ADAPTER_CONFIG: path / ADAPTER_CONFIG, ADAPTER_WEIGHTS: path / ADAPTER_WEIGHTS}
    for name, p in files.items():
        if not p.is_file():
            hint = " (a .bin adapter: save it again with safe_serialization=True)" if name == ADAPTER_WEIGHTS else ""
            raise UserError(f"LoRA adapter {path} has no {name}{hint}; give the dir PEFT's save_pretrained wrote")
    return files


@dataclass(frozen=True)
class PeftLoraConfig:
    """What trtserve reads of PEFT's adapter_config.json."""

    rank: int  # r
    alpha: float  # lora_alpha
    rslora: bool  # use_rslora: scaled by alpha / sqrt(r) rather than alpha / r
    target_modules: tuple[str, ...] | str  # module names (q_proj ...), or PEFT's regex
    base_model: str | None  # base_model_name_or_path (informative: paths differ between machines)

    @property
    def scaling(self) -> float:
        """The factor on B·A·x, as PEFT's LoraLayer computes it."""
        return self.alpha / math.sqrt(self.rank) if self.rslora else self.alpha / self.rank


# adapter_config.json keys whose non-default values change what the adapter computes and that trtserve
# does not implement, each with its default and what to do instead.
_UNSUPPORTED = {
    "use_dora": (False, "DoRA adapters are not served; merge it into the base model instead"),
    "bias": ("none", "adapters that train biases are not served; train with bias='none'"),
    "fan_in_fan_out": (False, "fan_in_fan_out (GPT-2's Conv1D) does not apply to trtserve's families"),
    "modules_to_save": (None, "modules_to_save (fully trained modules) are not served; merge them into the base"),
    "rank_pattern": ({}, "per-module ranks (rank_pattern) are not served; train with one r"),
    "alpha_pattern": ({}, "per-module alphas (alpha_pattern) are not served; train with one lora_alpha"),
    "use_qalora": (False, "QA-LoRA adapters are not served"),
}


def read_peft_config(path: Path) -> PeftLoraConfig:
    """Read and check adapter_config.json: a LoRA adapter whose every setting trtserve honours."""
    where = path / ADAPTER_CONFIG
    try:
        raw = json.loads(where.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise UserError(
            f"LoRA adapter config {where} cannot be read ({err}); save the adapter again with PEFT"
        ) from None
    if raw.get("peft_type", "LORA") != "LORA":
        raise UserError(f"{where} is a {raw['peft_type']} adapter; only LoRA adapters are served")
    for key, (default, fix) in _UNSUPPORTED.items():
        if raw.get(key) not in (None, default, [], {}):
            raise UserError(f"{where} sets {key}={raw[key]!r}: {fix}")
    try:
        rank, alpha = int(raw["r"]), float(raw.get("lora_alpha", 8))
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{where} has no integer rank `r`; save the adapter again with PEFT") from None
    if rank < 1:
        raise UserError(f"{where} has rank r={rank}; a LoRA adapter's rank is at least 1")
    targets = raw.get("target_modules") or ()
    return PeftLoraConfig(
        rank=rank,
        alpha=alpha,
        rslora=bool(raw.get("use_rslora", False)),
        target_modules=targets if isinstance(targets, str) else tuple(targets),
        base_model=raw.get("base_model_name_or_path"),
    )


class LoraConfig(BaseModel):
    """The `lora` engine option: adapters served on the base model, selected per request."""

    model_config = ConfigDict(extra="forbid")

    max_lora_rank: int = Field(64, ge=1)  # the largest rank r an adapter may have
    max_loras: int = Field(4, ge=1)  # distinct adapters one engine step may run (requests of others wait)
    max_cpu_loras: int = Field(8, ge=1)  # adapters held in memory (LRU; evicted ones reload from their dir)
    adapters: dict[str, str] = Field(default_factory=dict)  # name -> PEFT adapter dir, loaded at start

    @model_validator(mode="after")
    def _check(self) -> LoraConfig:
        if self.max_cpu_loras < self.max_loras:
            raise ValueError(
                f"max_cpu_loras ({self.max_cpu_loras}) must be at least max_loras ({self.max_loras}): "
                "a step's adapters are all held in memory"
            )
        for name in self.adapters:
            if problem := _name_problem(name):
                raise ValueError(problem)
        return self
