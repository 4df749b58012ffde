"""TensorRT-LLM build / serve plans against golden files (reviewed against the fact sheet).

Regenerate after an intended change with `TRTSERVE_UPDATE_GOLDEN=1 pytest tests/unit/test_trtllm_plans.py`,
then review the diff by hand: the goldens are the reference, not a snapshot of whatever the code does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trtserve.backends.tensorrt_llm import build_plan, serve_plan
from trtserve.backends.tensorrt_llm.capabilities import planned
from trtserve.backends.tensorrt_llm.quant import quant_algos
from trtserve.engine.errors import UserError
from trtserve.engine.layout import EngineBuildConfig, PluginConfig

GOLDEN = Path(__file__).parent / "golden_trtllm"


def check_golden(name: str, value) -> None:
    path = GOLDEN / f"{name}.json"
    text = json.dumps(value, indent=2, sort_keys=True) + "\n"
    if os.environ.get("TRTSERVE_UPDATE_GOLDEN"):
        path.write_text(text)
    assert json.loads(path.read_text()) == json.loads(text), f"{name} differs from {path}"


LIMITS = EngineBuildConfig(
    max_batch_size=64,
    max_input_len=4095,
    max_seq_len=4096,
    max_num_tokens=8192,
    plugin_config=PluginConfig(tokens_per_block=32, gpt_attention_plugin="float16"),
)
QUANTS = {
    "none": None,
    "fp8_kvfp8": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"},
    "awq_kvint8": {"quant_algo": "W4A16_AWQ", "kv_cache_quant_algo": "INT8", "group_size": 128},
    "nvfp4": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None},
}
CAPS = planned("1.2")  # the goldens below are release-neutral; release_plan_* are per release


@pytest.mark.parametrize("quant", QUANTS)
def test_build_config_golden(quant):
    q = QUANTS[quant]
    check_golden(f"build_config_{quant}", build_plan.build_config(LIMITS, q))
    argv = build_plan.trtllm_build_argv(LIMITS, q, "E/checkpoint", "E/engine", tp_size=2)
    check_golden(f"trtllm_build_argv_{quant}", argv)


def test_fused_mlp_and_fp8_fmha_follow_trtllm_build_rules():
    pc = {k: build_plan.plugin_config(LIMITS, q) for k, q in QUANTS.items()}
    assert [pc[k]["use_fused_mlp"] for k in QUANTS] == [True, True, False, False]  # None/FP8/MIXED only
    # builder.py: FP8 context FMHA follows the FP8 KV cache where paged context FMHA is on (NVFP4 has none here)
    assert [pc[k]["use_fp8_context_fmha"] for k in QUANTS] == [False, True, False, False]
    assert [pc[k]["use_paged_context_fmha"] for k in QUANTS] == [True, True, False, True]  # INT8 KV: off
    assert [pc[k]["gemm_plugin"] for k in QUANTS] == ["auto", "fp8", "auto", "nvfp4"]


@pytest.mark.parametrize("quant", [q for q in QUANTS if q != "awq_kvint8"])
def test_llm_api_options_golden(quant):
    opts = serve_plan.llm_api_options(LIMITS, QUANTS[quant], CAPS)
    check_golden(f"llm_api_options_{quant}", opts)


def test_int8_kv_cache_is_refused_on_the_pytorch_backend():
    with pytest.raises(UserError, match="INT8 KV cache is not available on TensorRT-LLM's PyTorch backend"):
        serve_plan.llm_api_options(LIMITS, QUANTS["awq_kvint8"], CAPS)


def test_trtllm_serve_argv_golden():
    argv = {
        "trtllm": serve_plan.trtllm_serve_argv(CAPS, "trtllm", "E/hf", "E/tokenizer", "E/llm_api_options.yaml"),
        "tensorrt": serve_plan.trtllm_serve_argv(CAPS, "tensorrt", "E/engine", "E/tokenizer", None, tp_size=2),
    }
    check_golden("trtllm_serve_argv", argv)


def test_runtime_overrides_kv_budget_and_reuse():
    opts = serve_plan.llm_api_options(LIMITS, None, CAPS)
    out = serve_plan.apply_runtime(opts, kv_cache_tokens=12345, enable_prefix_caching=False)
    assert out["kv_cache_config"] == {"enable_block_reuse": False, "free_gpu_memory_fraction": 0.9, "max_tokens": 12345}
    assert opts["kv_cache_config"] == {"enable_block_reuse": True, "free_gpu_memory_fraction": 0.9}  # not mutated
    lowered = serve_plan.apply_runtime(
        opts, kv_cache_tokens=None, enable_prefix_caching=True, max_batch_size=16, max_num_tokens=100000
    )
    assert (lowered["max_batch_size"], lowered["max_num_tokens"]) == (16, 8192)  # never above the build's
    trt = serve_plan.apply_runtime(
        serve_plan.tensorrt_runtime_options(LIMITS), kv_cache_tokens=None, enable_prefix_caching=True, max_batch_size=4
    )
    assert trt["max_batch_size"] == 4


@pytest.mark.parametrize(
    "q, fragment",
    [
        ({"quant_algo": "INT8"}, "INT8 is only a kv_cache_quant_algo"),
        ({"quant_algo": "W3A3"}, "'W3A3' is not a TensorRT-LLM QuantAlgo"),
        ({"quant_algo": "FP8", "kv_cache_quant_algo": "FP4"}, "kv_cache_quant_algo 'FP4' is not supported"),
    ],
)
def test_bad_quantization_is_a_user_error(q, fragment):
    with pytest.raises(UserError, match=fragment):
        build_plan.build_config(LIMITS, q)


def test_no_quant_spellings():
    assert quant_algos({"quant_algo": "NO_QUANT"}) == (None, None)
    assert quant_algos(None) == (None, None)


def _release_plan(release: str) -> dict:
    """What the dry run plans for `release`: options and command lines of both workflows."""
    caps = planned(release)
    opts = "E/llm_api_options.yaml"
    plan = {
        "trtllm": {
            "options": serve_plan.llm_api_options(LIMITS, None, caps),
            "serve": serve_plan.trtllm_serve_argv(caps, "trtllm", "E/hf", "E/tokenizer", opts),
        }
    }
    try:
        serve = serve_plan.trtllm_serve_argv(caps, "tensorrt", "E/engine", "E/tokenizer", opts)
        build = build_plan.trtllm_build_argv(LIMITS, None, "E/checkpoint", "E/engine")
        plan["tensorrt"] = {"options": serve_plan.tensorrt_runtime_options(LIMITS), "build": build, "serve": serve}
    except UserError as err:
        plan["tensorrt"] = {"refused": str(err)}
    return plan


@pytest.mark.parametrize("release", ["1.0", "1.1", "1.2", "main"])
def test_release_plans_golden(release):
    """1.0: enable_trtllm_sampler and `--backend trt`; 1.1/1.2: `--backend tensorrt`; main: no TensorRT."""
    check_golden(f"release_plan_{release}", _release_plan(release))


def test_nvfp4_kv_cache_is_left_to_the_checkpoint():
    """KvCacheConfig acts on dtype "fp8" only; an NVFP4 KV cache comes from the checkpoint's config."""
    kv = serve_plan.llm_api_options(LIMITS, {"quant_algo": "NVFP4", "kv_cache_quant_algo": "NVFP4"}, CAPS)
    assert "dtype" not in kv["kv_cache_config"]
    assert serve_plan.llm_api_options(LIMITS, QUANTS["fp8_kvfp8"], CAPS)["kv_cache_config"]["dtype"] == "fp8"


def test_fp8_context_fmha_is_named_either_way():
    """trtllm-build defaults --use_fp8_context_fmha to enable, so a non-FP8 plan must say disable."""
    for quant, on in (("none", "disable"), ("fp8_kvfp8", "enable")):
        argv = build_plan.trtllm_build_argv(LIMITS, QUANTS[quant], "C", "E")
        assert argv[argv.index("--use_fp8_context_fmha") + 1] == on


def test_qwen_checkpoints_get_qwen_type():
    assert build_plan.trtllm_checkpoint_config({"architecture": "Qwen2ForCausalLM"})["qwen_type"] == "qwen2"
    assert "qwen_type" not in build_plan.trtllm_checkpoint_config({"architecture": "LlamaForCausalLM"})
