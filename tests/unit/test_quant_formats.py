"""The quant-format registry (trtserve/models/quant_formats.py) is the one table every reader uses:
the torch engine's kernels, the build's choices and checks, and the TensorRT-LLM plans."""

from __future__ import annotations

import pytest

from trtserve.backends.tensorrt_llm import build_plan
from trtserve.build.config import BuildConfig
from trtserve.engine.layout import EngineBuildConfig, PluginConfig
from trtserve.models import quant_formats as qf
from trtserve.models.quantized import make_linear

LIMITS = EngineBuildConfig(
    max_batch_size=8,
    max_input_len=63,
    max_seq_len=64,
    max_num_tokens=64,
    plugin_config=PluginConfig(tokens_per_block=16),
)


def test_every_builtin_names_a_kernel_and_unique_cli_names():
    for spec in qf.QUANT_FORMATS.values():
        assert callable(spec.kernel()), spec.quant_algo
    names = qf.quant_names()
    assert len(names) == len(set(names)) and names[0] == "w8a16"
    assert qf.by_name("w4a16")[0] is qf.by_name("w4a16_awq")[0] is qf.QUANT_FORMATS["W4A16_AWQ"]
    assert qf.kv_by_name("fp8").kv_cache_quant_algo == "FP8"


def test_clashes_are_refused():
    with pytest.raises(ValueError, match="clashes"):
        qf.register_quant_format(qf.QUANT_FORMATS["FP8"])
    toy = qf.QuantFormatSpec("TOY", (qf.ModeloptRecipe("fp8", "FP8_DEFAULT_CFG", True, ""),), 1, "x:y")
    with pytest.raises(ValueError, match="clashes"):
        qf.register_quant_format(toy)


def test_unknown_quant_algo_has_no_kernel():
    with pytest.raises(ValueError, match="the torch engine has no kernel for quant_algo W3A3"):
        make_linear({}, "W3A3", None)


def test_a_registered_format_reaches_the_build_config_and_the_trtllm_plan(request):
    spec = qf.QuantFormatSpec(
        "W8A16_GPTQ",  # a real QuantAlgo, so TensorRT-LLM's checks accept it
        (qf.ModeloptRecipe("toy_gptq", "INT8_WEIGHT_ONLY_CFG", False, "toy"),),
        1,
        "x:y",
        trtllm=qf.TrtllmFlags(fused_mlp=True, gemm_plugin="toy"),
    )
    with pytest.raises(ValueError, match="Input should be 'w8a16'"):
        BuildConfig(quant="toy_gptq")
    qf.register_quant_format(spec)
    request.addfinalizer(lambda: qf.unregister_quant_format("W8A16_GPTQ"))
    assert BuildConfig(quant="toy_gptq").quant == "toy_gptq"
    pc = build_plan.plugin_config(LIMITS, {"quant_algo": "W8A16_GPTQ"})
    assert (pc["use_fused_mlp"], pc["gemm_plugin"], pc["use_fp8_context_fmha"]) == (True, "toy", False)
