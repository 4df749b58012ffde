"""The LoRA contract without torch: adapter identity by content hash, PEFT's config read and refused in
one sentence, the `lora` engine option; and the family spec's mapping of PEFT modules onto engine linears."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from trtserve.engine.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS, LoraConfig, adapter_ref, read_peft_config
from trtserve.engine.errors import UserError
from trtserve.engine.options import OPTIONS, EngineOptions, check_backend
from trtserve.engine.run_config import RuntimeConfig


def write(d, **config):
    d.mkdir(parents=True, exist_ok=True)
    (d / ADAPTER_CONFIG).write_text(json.dumps({"peft_type": "LORA", "r": 8, "lora_alpha": 16} | config))
    (d / ADAPTER_WEIGHTS).write_bytes(b"weights")
    return d


def test_the_ref_hashes_both_files_and_changes_with_either(tmp_path):
    d = write(tmp_path / "a")
    ref = adapter_ref("a", d)
    assert ref.name == "a" and ref.content_hash.startswith("sha256:")
    assert adapter_ref("a", d) == ref and adapter_ref("b", d).content_hash == ref.content_hash
    (d / ADAPTER_WEIGHTS).write_bytes(b"other weights")
    assert adapter_ref("a", d).content_hash != ref.content_hash
    with pytest.raises(UserError, match="no adapter_model.safetensors .a .bin adapter: save it again with safe_"):
        (d / ADAPTER_WEIGHTS).unlink()
        adapter_ref("a", d)


def test_scaling_is_alpha_over_r_or_over_sqrt_r_with_rslora(tmp_path):
    assert read_peft_config(write(tmp_path / "a")).scaling == 2.0
    assert read_peft_config(write(tmp_path / "b", use_rslora=True)).scaling == 16 / math.sqrt(8)
    cfg = read_peft_config(write(tmp_path / "c", target_modules=["q_proj", "v_proj"], rank_pattern={}))
    assert cfg.target_modules == ("q_proj", "v_proj") and cfg.rank == 8


@pytest.mark.parametrize(
    ("setting", "fix"),
    [
        ({"use_dora": True}, "DoRA adapters are not served"),
        ({"bias": "all"}, "train with bias='none'"),
        ({"rank_pattern": {"q_proj": 4}}, "train with one r"),
        ({"modules_to_save": ["lm_head"]}, "merge them into the base"),
        ({"peft_type": "IA3"}, "only LoRA adapters are served"),
        ({"r": 0}, "rank is at least 1"),
    ],
)
def test_settings_trtserve_does_not_honour_are_refused_in_one_sentence(tmp_path, setting, fix):
    with pytest.raises(UserError) as err:
        read_peft_config(write(tmp_path / "a", **setting))
    assert fix in str(err.value) and "\n" not in str(err.value)


def test_the_lora_option_is_one_field_and_one_spec_for_every_backend():
    cfg = RuntimeConfig.model_validate({"lora": {"max_loras": 2, "adapters": {"sql": "/adapters/sql"}}})
    assert cfg.options.lora == LoraConfig(max_loras=2, adapters={"sql": "/adapters/sql"})
    assert cfg.options.enabled() == {"lora": cfg.lora}
    assert cfg.options.identity() == {}  # a request's adapter hash is its identity, not the option
    # torch runs adapters itself; TensorRT-LLM through LoraConfig / LoRARequest (tests/contract/test_trtllm_lora.py)
    assert OPTIONS["lora"].backends == {"torch", "tensorrt", "trtllm"}
    for backend in ("torch", "tensorrt", "trtllm"):
        check_backend(EngineOptions(lora=LoraConfig()), backend)
    with pytest.raises(ValidationError, match="max_cpu_loras .1. must be at least max_loras .2."):
        LoraConfig(max_loras=2, max_cpu_loras=1)
    with pytest.raises(ValidationError, match="not usable as a model name"):
        LoraConfig(adapters={"a/b": "/x"})


def test_peft_modules_map_onto_the_engines_fused_linears_through_the_family_spec():
    from trtserve.models import llama
    from trtserve.models.lora import engine_parts, module_names

    assert engine_parts(llama.FAMILY) == {
        "qkv": ("q_proj", "k_proj", "v_proj"),
        "dense": ("o_proj",),
        "proj": ("down_proj",),
        "fc_gate": ("gate_proj", "up_proj"),  # [fc; gate]: fc is the activated branch (gate_proj)
    }
    assert set(module_names(llama.FAMILY).values()) == {
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"
    }  # fmt: skip
