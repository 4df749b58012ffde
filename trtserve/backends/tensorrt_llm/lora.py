"""LoRA adapters on TensorRT-LLM: PEFT adapters and our `lora` option -> its LoraConfig fields,
LoRARequest arguments and `trtllm-build` flags. Pure functions and one registry; no tensorrt_llm import.

What TensorRT-LLM takes (its source and docs; docs/tensorrt-llm.md "LoRA adapters" says what is pinned):
    LoraConfig(lora_dir, lora_ckpt_source, max_lora_rank, lora_target_modules,
               trtllm_modules_to_hf_modules, max_loras, max_cpu_loras, ...)
        1.0-1.2: a dataclass in lora_helper.py (re-exported by lora_manager.py; unknown kwargs: TypeError);
        main: a pydantic StrictBaseModel (_torch/peft/lora/config.py, exported by llmapi). The LLM
        argument `lora_config` takes it in every 1.x, on the PyTorch and the TensorRT-engine LLM.
    LoRARequest(lora_name, lora_int_id, lora_path)    executor/request.py, 1.0-main; lora_path must
        exist. TensorRT-LLM caches an adapter's weights by lora_int_id, so an id is never reused here
        for other contents.
    trtllm-build --lora_plugin DTYPE --lora_dir D... --max_lora_rank R --lora_target_modules M...
        commands/build.py: the LoRA flags do nothing unless lora_plugin is set.
    Module names: get_default_trtllm_modules_to_hf_modules (lora_helper.py): attn_q=q_proj,
        attn_k=k_proj, attn_v=v_proj, attn_dense=o_proj, mlp_h_to_4h=gate_proj, mlp_gate=up_proj,
        mlp_4h_to_h=down_proj (as the checkpoint's mlp.fc = gate_proj, mlp.gate = up_proj).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path

from trtserve.engine.adapters import AdapterRef, LoraConfig, adapter_ref, read_peft_config
from trtserve.engine.errors import UserError
from trtserve.engine.layout import LORA_DIR

# PEFT's module name (the last part of target_modules entries) -> TensorRT-LLM's LoRA module name
HF_TO_TRTLLM = {
    "q_proj": "attn_q",
    "k_proj": "attn_k",
    "v_proj": "attn_v",
    "o_proj": "attn_dense",
    "gate_proj": "mlp_h_to_4h",
    "up_proj": "mlp_gate",
    "down_proj": "mlp_4h_to_h",
}
ALL_MODULES = tuple(HF_TO_TRTLLM.values())  # every module an adapter of trtserve's families can target
# The LoraConfig fields trtserve sets; each is in every release line's LoraConfig (1.0 to main).
LORA_FIELDS = frozenset({"lora_dir", "max_lora_rank", "max_loras", "max_cpu_loras", "lora_target_modules"})


@dataclass(frozen=True)
class AdapterSpec:
    """One PEFT adapter as TensorRT-LLM will see it."""

    ref: AdapterRef
    path: Path  # the dir TensorRT-LLM reads (lora_dir entry, LoRARequest.lora_path)
    rank: int  # r
    modules: tuple[str, ...]  # TensorRT-LLM module names, in ALL_MODULES order


def read_adapter(name: str, path: str | Path) -> AdapterSpec:
    """The PEFT adapter at `path` served as `name`; UserError for a dir that is not one, or a target
    module TensorRT-LLM cannot apply it to."""
    path = Path(path)
    ref = adapter_ref(name, path)
    peft = read_peft_config(path)
    if isinstance(peft.target_modules, str):
        raise UserError(
            f"LoRA adapter {name} gives target_modules as the pattern {peft.target_modules!r}; TensorRT-LLM "
            "needs module names: save it with target_modules as a list (q_proj, v_proj, ...)"
        )
    wanted = {m.rsplit(".", 1)[-1] for m in peft.target_modules}
    unknown = sorted(wanted - HF_TO_TRTLLM.keys())
    if unknown or not wanted:
        raise UserError(
            f"LoRA adapter {name} targets {', '.join(unknown) or 'no modules'}; TensorRT-LLM applies adapters to "
            f"{', '.join(HF_TO_TRTLLM)} only: train it on those"
        )
    modules = tuple(m for hf, m in HF_TO_TRTLLM.items() if hf in wanted)
    return AdapterSpec(ref, path, peft.rank, modules)


def union_modules(specs: list[AdapterSpec]) -> list[str]:
    return [m for m in ALL_MODULES if any(m in s.modules for s in specs)]


def lora_config_options(specs: list[AdapterSpec], limits: LoraConfig, modules: list[str] | None = None) -> dict:
    """The LLM argument `lora_config` as a dict of LoraConfig fields (the options YAML holds it so).

    modules: the LoRA modules the model is built with; None: every module (the PyTorch backend builds
    LoRA layers from this list, so any adapter loaded later fits)."""
    for s in specs:
        check_rank(s, limits.max_lora_rank)
    return {
        "lora_dir": [str(s.path) for s in specs],
        "lora_target_modules": list(modules if modules is not None else ALL_MODULES),
        "max_lora_rank": limits.max_lora_rank,
        "max_loras": limits.max_loras,
        "max_cpu_loras": limits.max_cpu_loras,
    }


def check_rank(spec: AdapterSpec, max_rank: int) -> None:
    if spec.rank > max_rank:
        raise UserError(
            f"LoRA adapter {spec.ref.name} has rank {spec.rank}, above max_lora_rank {max_rank}; raise "
            f"lora.max_lora_rank to at least {spec.rank} (for a TensorRT engine: rebuild it with that adapter)"
        )


def check_fields(lora_config: dict, fields: frozenset[str], label: str) -> None:
    """Refuse LoraConfig fields the TensorRT-LLM in use lacks, in one sentence."""
    missing = sorted(set(lora_config) - fields)
    if missing:
        raise UserError(
            f"{label} has no LoraConfig field {', '.join(missing)}, which trtserve's lora option sets; "
            "use TensorRT-LLM 1.0 or later, or serve the adapters with the torch backend"
        )


def build_flags(specs: list[AdapterSpec], dtype: str) -> list[str]:
    """`trtllm-build` flags that build the LoRA plugin in, sized for `specs` (packed as task ids 0..n-1)."""
    if not specs:
        return []
    return [
        "--lora_plugin",
        dtype,
        "--lora_dir",
        *[str(s.path) for s in specs],
        "--max_lora_rank",
        str(max(s.rank for s in specs)),
        "--lora_target_modules",
        *union_modules(specs),
    ]


def build_lora_config(specs: list[AdapterSpec]) -> dict:
    """BuildConfig.lora_config as trtllm-build records it for `build_flags(specs, ...)`."""
    return {
        "lora_dir": [str(s.path) for s in specs],
        "lora_ckpt_source": "hf",
        "max_lora_rank": max(s.rank for s in specs),
        "lora_target_modules": union_modules(specs),
    }


@dataclass(frozen=True)
class Served:
    """What a LoRARequest for one adapter carries."""

    spec: AdapterSpec
    int_id: int  # lora_int_id: TensorRT-LLM's cache key for these weights (a TensorRT engine's task id)


class AdapterTable:
    """The adapters one TensorRT-LLM engine serves: name -> (int id, dir, ref). One owner, small API.

    modules / max_rank: what the LLM was built for; an adapter needing more is refused on `add`.
    Ids count up from 0 and are never reused, so TensorRT-LLM's cache, keyed by id, never serves an
    old adapter's weights for a new one of the same name.
    """

    def __init__(self, modules: list[str], max_rank: int):
        self.modules, self.max_rank = tuple(modules), max_rank
        self._by_name: dict[str, Served] = {}
        self._ids = itertools.count()

    def add(self, spec: AdapterSpec) -> AdapterRef:
        """Serve `spec` under its name (replacing a same-named one); UserError when it does not fit."""
        check_rank(spec, self.max_rank)
        extra = [m for m in spec.modules if m not in self.modules]
        if extra:
            raise UserError(
                f"LoRA adapter {spec.ref.name} targets {', '.join(extra)}, which this TensorRT-LLM engine was not "
                f"built with (it has {', '.join(self.modules)}); rebuild it with an adapter on those modules "
                "(`trtserve build ... --lora NAME=DIR`)"
            )
        old = self._by_name.get(spec.ref.name)
        if old is not None and old.spec.ref == spec.ref:
            return spec.ref  # the same files again: same id, same cached weights
        self._by_name[spec.ref.name] = Served(spec, next(self._ids))
        return spec.ref

    def remove(self, name: str) -> None:
        if self._by_name.pop(name, None) is None:
            raise UserError(f"no LoRA adapter named {name} is served; the served ones are {self._names()}")

    def lookup(self, ref: AdapterRef) -> Served:
        """The served adapter `ref` names; UserError when it is unknown or was replaced since."""
        served = self._by_name.get(ref.name)
        if served is None:
            raise UserError(f"no LoRA adapter named {ref.name} is served; the served ones are {self._names()}")
        if served.spec.ref != ref:
            raise UserError(
                f"LoRA adapter {ref.name} is served with other contents now ({served.spec.ref}, not {ref}); "
                "send the request again"
            )
        return served

    def refs(self) -> list[AdapterRef]:
        return [s.spec.ref for s in self._by_name.values()]

    def _names(self) -> str:
        return ", ".join(sorted(self._by_name)) or "none"


def packed_lora_config(specs: list[AdapterSpec], tensorrt: bool) -> dict:
    """`lora_config` of an engine dir that packs `specs` under lora/NAME (lora_dir relative to the engine
    dir, in packing order: a TensorRT engine's task ids). tensorrt: the LoRA plugin is sized at build for
    these adapters' largest rank and their modules; the PyTorch backend takes any module, any rank up to
    the default max_lora_rank or the largest packed one."""
    packed = [replace(s, path=Path(LORA_DIR) / s.ref.name) for s in specs]
    rank = max(s.rank for s in specs)
    if tensorrt:
        return lora_config_options(packed, LoraConfig(max_lora_rank=rank), union_modules(specs))
    return lora_config_options(packed, LoraConfig(max_lora_rank=max(rank, LoraConfig().max_lora_rank)))
