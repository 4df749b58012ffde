"""How `trtllm-serve --extra_llm_api_options FILE` (and Dynamo's TensorRT-LLM worker, which calls the same
function) turns the options YAML into LLM arguments: llmapi/llm_args.py `update_llm_args_with_extra_options`
-> `update_llm_args_with_extra_dict`. Nested configs are built from their dicts there; for
`speculative_config` each release has its own way (its llm_args.py passes `load_speculative`):

    1.0, 1.1   DecodingBaseConfig.from_dict: a table keyed by decoding_type ("NGram", "DraftTarget", ...)
    1.2, main  the SpeculativeConfig discriminated union on each class's Literal decoding_type
               (DraftTargetDecodingConfig's is "Draft_Target")
"""

from __future__ import annotations

from collections.abc import Callable

import yaml


def options_loader(load_speculative: Callable[[dict], object]) -> Callable[[dict, str], dict]:
    def update_llm_args_with_extra_options(llm_args: dict, extra_llm_api_options: str) -> dict:
        with open(extra_llm_api_options) as f:
            extra = yaml.safe_load(f)
        out = {**llm_args, **extra}
        if isinstance(out.get("speculative_config"), dict):
            out["speculative_config"] = load_speculative(dict(out["speculative_config"]))
        return out

    return update_llm_args_with_extra_options


def from_dict_table(table: dict[str, type]) -> Callable[[dict], object]:
    """DecodingBaseConfig.from_dict (1.0, 1.1): ValueError for a decoding_type not in its table."""

    def from_dict(data: dict):
        cls = table.get(data.get("decoding_type"))
        if cls is None:
            raise ValueError(f"Invalid decoding type: {data.get('decoding_type')}")
        data.pop("decoding_type")
        return cls(**data)

    return from_dict


def discriminated_union(*classes: type) -> Callable[[dict], object]:
    """The SpeculativeConfig union (1.2, main): pydantic picks the class whose Literal decoding_type matches."""
    from typing import Annotated, Union

    from pydantic import Field, TypeAdapter

    union = Annotated[Union[classes], Field(discriminator="decoding_type")]  # noqa: UP007 - a runtime tuple
    return TypeAdapter(union).validate_python
