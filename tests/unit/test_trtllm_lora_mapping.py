"""The TensorRT-LLM LoRA mapping without TensorRT-LLM (backends/tensorrt_llm/lora.py): PEFT module
names -> TensorRT-LLM's, the adapter table's ids, trtllm-build's flags, and refusals in one sentence.
End to end against the per-release fakes: tests/contract/test_trtllm_lora.py."""

from __future__ import annotations

import dataclasses
import json

import pytest

from trtserve.backends.tensorrt_llm import capabilities, serve_plan
from trtserve.backends.tensorrt_llm.lora import (
    ALL_MODULES,
    LORA_FIELDS,
    AdapterTable,
    build_flags,
    build_lora_config,
    read_adapter,
)
from trtserve.engine.errors import UserError
from trtserve.engine.layout import EngineBuildConfig, PluginConfig


def peft_dir(path, targets, r=4, weights=b"w"):
    """A PEFT-format dir: the config trtserve reads and a weights file (hashed, not parsed, here)."""
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "r": r, "lora_alpha": 8, "target_modules": targets})
    )
    (path / "adapter_model.safetensors").write_bytes(weights)
    return path


def test_peft_modules_map_onto_trtllm_names(tmp_path):
    targets = ["down_proj", "self_attn.q_proj", "o_proj", "up_proj", "gate_proj", "k_proj", "v_proj"]
    spec = read_adapter("all", peft_dir(tmp_path / "a", targets))
    # gate_proj is mlp_h_to_4h (the checkpoint's mlp.fc), up_proj is mlp_gate (its mlp.gate)
    assert spec.modules == ("attn_q", "attn_k", "attn_v", "attn_dense", "mlp_h_to_4h", "mlp_gate", "mlp_4h_to_h")
    assert spec.modules == ALL_MODULES and spec.rank == 4 and spec.ref.name == "all"


@pytest.mark.parametrize(
    "targets, message",
    [
        ("q_proj|v_proj", "gives target_modules as the pattern 'q_proj|v_proj'; TensorRT-LLM needs module names"),
        (["q_proj", "lm_head"], "targets lm_head; TensorRT-LLM applies adapters to q_proj, k_proj"),
    ],
)
def test_adapters_trtllm_cannot_apply_are_refused_in_one_sentence(tmp_path, targets, message):
    with pytest.raises(UserError) as err:
        read_adapter("a", peft_dir(tmp_path / "a", targets))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_ids_count_up_and_are_never_reused_for_other_weights(tmp_path):
    table = AdapterTable(["attn_q", "attn_v"], max_rank=8)
    a = read_adapter("a", peft_dir(tmp_path / "a", ["q_proj"]))
    b = read_adapter("b", peft_dir(tmp_path / "b", ["v_proj"]))
    a_again = read_adapter("a", peft_dir(tmp_path / "a2", ["q_proj"]))  # same bytes: the same adapter
    a_new = read_adapter("a", peft_dir(tmp_path / "a3", ["q_proj"], weights=b"other"))
    table.add(a), table.add(b)
    assert (table.lookup(a.ref).int_id, table.lookup(b.ref).int_id) == (0, 1)
    table.add(a_again)
    assert table.lookup(a.ref).int_id == 0  # TensorRT-LLM's cached weights for id 0 are still right
    table.add(a_new)
    assert table.lookup(a_new.ref).int_id == 2
    with pytest.raises(UserError, match="served with other contents now"):
        table.lookup(a.ref)
    table.remove("b")
    table.add(b)
    assert table.lookup(b.ref).int_id == 3 and [r.name for r in table.refs()] == ["a", "b"]
    with pytest.raises(UserError, match="no LoRA adapter named c is served; the served ones are a, b"):
        table.remove("c")


def test_the_table_refuses_what_the_engine_was_not_built_for(tmp_path):
    table = AdapterTable(["attn_q", "attn_v"], max_rank=8)
    with pytest.raises(UserError, match="targets attn_dense, mlp_gate, which this TensorRT-LLM engine was not built"):
        table.add(read_adapter("x", peft_dir(tmp_path / "x", ["q_proj", "o_proj", "up_proj"])))
    with pytest.raises(UserError, match="LoRA adapter y has rank 16, above max_lora_rank 8"):
        table.add(read_adapter("y", peft_dir(tmp_path / "y", ["q_proj"], r=16)))
    assert table.refs() == []


def test_trtllm_build_flags_pack_adapters_in_order(tmp_path):
    a = read_adapter("a", peft_dir(tmp_path / "a", ["v_proj", "q_proj"], r=4))
    b = read_adapter("b", peft_dir(tmp_path / "b", ["down_proj"], r=16))
    flags = build_flags([a, b], "bfloat16")
    assert flags == [
        "--lora_plugin",
        "bfloat16",
        "--lora_dir",
        str(tmp_path / "a"),
        str(tmp_path / "b"),
        "--max_lora_rank",
        "16",
        "--lora_target_modules",
        "attn_q",
        "attn_v",
        "mlp_4h_to_h",
    ]
    assert build_flags([], "float16") == []
    assert build_lora_config([a, b])["lora_target_modules"] == ["attn_q", "attn_v", "mlp_4h_to_h"]


def test_a_release_without_a_lora_field_is_refused_before_tensorrt_llm_sees_it(tmp_path):
    caps = capabilities.planned("1.0")
    assert caps.lora_fields >= LORA_FIELDS and "lora_config" in caps.llm_args("trtllm") | caps.llm_args("tensorrt")
    limits = EngineBuildConfig(
        max_batch_size=8,
        max_input_len=64,
        max_seq_len=128,
        max_num_tokens=256,
        plugin_config=PluginConfig(tokens_per_block=32),
    )
    lora = {"lora_dir": [], "max_lora_rank": 8, "max_loras": 1, "max_cpu_loras": 1, "lora_target_modules": []}
    assert serve_plan.llm_api_options(limits, None, caps, lora)["lora_config"] == lora
    lacking = dataclasses.replace(caps, lora_fields=LORA_FIELDS - {"max_loras"})
    with pytest.raises(UserError, match="has no LoraConfig field max_loras, which trtserve's lora option sets"):
        serve_plan.llm_api_options(limits, None, lacking, lora)
    with pytest.raises(UserError, match="has no LoraConfig field max_loras"):
        serve_plan.fit_options({"lora_config": lora}, "trtllm", lacking, "opts.yaml")
