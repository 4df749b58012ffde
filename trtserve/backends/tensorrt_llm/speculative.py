"""Speculative decoding on TensorRT-LLM: our `speculative` option -> the LLM argument `speculative_config`.

What TensorRT-LLM takes (tensorrt_llm/llmapi/llm_args.py; release lines placed by content, not run):
    NGramDecodingConfig(max_draft_len, max_matching_ngram_size, is_keep_all, is_use_oldest, is_public_pool)
        1.0: max_matching_ngram_size defaults to 0 (so it is always given here); main: must be > 0.
        It matches the last max_matching_ngram_size tokens, then shorter suffixes down to one token.
    DraftTargetDecodingConfig(max_draft_len, <draft model dir>)
        the draft dir field is `speculative_model_dir` in 1.0-1.1 and `speculative_model` from 1.2
        (1.2 still accepts the old name as an alias; main only the new one).
    DecodingBaseConfig.max_concurrency: no speculation above this batch size (1.1 and later; not in 1.0).
    Every decoding config is a pydantic StrictBaseModel: an unknown field raises. NGram and DraftTarget
    declare `supports_backend(backend) -> backend == "pytorch"`: a TensorRT engine cannot run them, and
    trtllm-build's --speculative_decoding_mode offers no n-gram or draft-model mode the LLM API drives.
    Per request, TensorRT-LLM has no switch: its executor turns speculation off for a whole step only.
In an options YAML the config is a dict with `decoding_type`, which trtllm-serve and Dynamo's worker read
with the release's own llm_args.py (`update_llm_args_with_extra_options`): 1.0-1.1 dispatch through
DecodingBaseConfig.from_dict's table ("DraftTarget"), 1.2 and main through the SpeculativeConfig
discriminated union on each class's Literal, where the draft-model one is "Draft_Target" (DRAFT_TARGET_TYPE).
`decoding_config` turns either spelling into the installed release's class, which also lets an engine dir's
YAML carry EAGLE-3 or MTP configs written by hand.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from trtserve.engine.errors import UserError
from trtserve.engine.layout import HF_DIR
from trtserve.engine.speculative import SpeculativeConfig

SPEC_OPTION = "speculative_config"  # the LLM argument (and options YAML key)
# decoding_type -> the llmapi class (DecodingBaseConfig.from_dict's table, 1.0 to main)
DECODING_CLASSES = {
    "NGram": "NGramDecodingConfig",
    "DraftTarget": "DraftTargetDecodingConfig",  # from_dict's key (1.0-1.1)
    "Draft_Target": "DraftTargetDecodingConfig",  # the class's Literal (1.2 on)
    "Eagle": "EagleDecodingConfig",
    "Eagle3": "Eagle3DecodingConfig",  # 1.2 and later; an EagleDecodingConfig before
    "MTP": "MTPDecodingConfig",
}
# release line -> (draft model dir field, has max_concurrency)
DRAFT_FIELDS = {
    "1.0": ("speculative_model_dir", False),
    "1.1": ("speculative_model_dir", True),
    "1.2": ("speculative_model", True),
    "main": ("speculative_model", True),
}

# release line -> the draft-model config's decoding_type that release's YAML reader takes (see above)
DRAFT_TARGET_TYPE = {"1.0": "DraftTarget", "1.1": "DraftTarget", "1.2": "Draft_Target", "main": "Draft_Target"}


def speculative_options(spec: SpeculativeConfig, line: str, backend: str) -> dict:
    """`speculative_config` for release line `line` (a capabilities.RELEASES key); UserError where
    TensorRT-LLM cannot run `spec` (TensorRT engines; n-gram lookup with a minimum above one token)."""
    if backend != "trtllm":
        raise UserError(
            f"speculative decoding ({spec.method}) runs on TensorRT-LLM's PyTorch backend only (its NGram and "
            "DraftTarget decoding configs refuse TensorRT engines); build the engine dir with --backend trtllm, "
            "or serve it with the torch backend"
        )
    draft_field, has_concurrency = DRAFT_FIELDS[line]
    out: dict = {"max_draft_len": spec.num_speculative_tokens}
    if spec.method == "ngram":
        if spec.prompt_lookup_min != 1:
            raise UserError(
                f"prompt_lookup_min {spec.prompt_lookup_min} has no TensorRT-LLM counterpart (its n-gram lookup "
                "always tries suffixes down to one token); set speculative.prompt_lookup_min: 1"
            )
        # one private pool per request, newest match first: the proposals our own n-gram proposer makes
        out = {"decoding_type": "NGram", **out, "max_matching_ngram_size": spec.prompt_lookup_max}
        out |= {"is_keep_all": True, "is_use_oldest": False, "is_public_pool": False}
    else:
        draft = str(draft_checkpoint(spec.draft_engine_dir))
        out = {"decoding_type": DRAFT_TARGET_TYPE[line], **out, draft_field: draft}
    if has_concurrency:
        out["max_concurrency"] = spec.batch_limit
    return out


def draft_checkpoint(draft_engine_dir: Path) -> Path:
    """The Hugging Face checkpoint TensorRT-LLM loads as the draft: a `--backend trtllm` engine dir's hf/."""
    from trtserve.engine.manifest import read_manifest

    backend = read_manifest(draft_engine_dir).backend
    if backend != "trtllm":
        raise UserError(
            f"draft engine dir {draft_engine_dir} was built for the {backend} backend; TensorRT-LLM loads its "
            "draft from a Hugging Face checkpoint: build the draft with `trtserve build DRAFT -o DIR --backend trtllm`"
        )
    return Path(draft_engine_dir).resolve() / HF_DIR


def notes(spec: SpeculativeConfig, line: str) -> list[str]:
    """What of `spec` this release does not apply (printed by the dry run)."""
    out = [
        f"  # speculative.min_acceptance {spec.min_acceptance} is not applied: TensorRT-LLM's acceptance "
        "thresholds switch speculation off for the whole engine, not per sequence"
    ]
    if not DRAFT_FIELDS[line][1]:
        out.append(
            f"  # speculative.max_batch_size {spec.batch_limit} is not applied: TensorRT-LLM {line} has no "
            "max_concurrency and speculates at every batch size"
        )
    return out


def decoding_config(tllm: ModuleType, options: dict):
    """The options YAML's `speculative_config` dict as the installed release's decoding-config object."""
    data = dict(options)
    kind = data.pop("decoding_type", None)
    name = DECODING_CLASSES.get(kind)
    llmapi = importlib.import_module(tllm.__name__ + ".llmapi")
    cls = getattr(llmapi, name, None) if name else None
    if cls is None:
        known = ", ".join(k for k, v in DECODING_CLASSES.items() if hasattr(llmapi, v))
        raise UserError(
            f"speculative_config has decoding_type {kind!r}, which TensorRT-LLM {getattr(tllm, '__version__', '')} "
            f"has no decoding config for (it has {known}); fix the engine dir's options YAML"
        )
    fields = getattr(cls, "model_fields", {})
    for old, new in (("speculative_model_dir", "speculative_model"), ("speculative_model", "speculative_model_dir")):
        if old in data and old not in fields and new in fields:  # planned for a release that names it otherwise
            data[new] = data.pop(old)
    if "max_concurrency" in data and "max_concurrency" not in fields:  # 1.0: speculates at every batch size
        del data["max_concurrency"]
    try:
        return cls(**data)
    except (TypeError, ValueError) as err:  # pydantic ValidationError is a ValueError
        first = _reason(err)
        raise UserError(
            f"TensorRT-LLM {getattr(tllm, '__version__', '')} refused speculative_config ({first}); rebuild the "
            "engine dir with `trtserve build ... --force` on this host, or fix the run config's speculative option"
        ) from None


def _reason(err: Exception) -> str:
    """One line: pydantic's first error as `field: reason`, else the message's first line."""
    errors = err.errors() if hasattr(err, "errors") else []
    if not errors:
        return str(err).splitlines()[0]
    loc = ".".join(map(str, errors[0]["loc"]))
    return f"{loc}: {errors[0]['msg']}" if loc else errors[0]["msg"]
