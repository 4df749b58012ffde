"""Fake TensorRT-LLM 1.0 (released 2025-09-24): the slice of its API trtserve's adapter calls,
behaving as 1.0's source does (fact sheet section 10). Layout as upstream's tensorrt_llm/:

    __init__.py            LLM, SamplingParams, __version__                  (tensorrt_llm/__init__.py)
    llmapi/llm_args.py     TorchLlmArgs with enable_trtllm_sampler / enable_mixed_sampler, TrtLlmArgs
    llmapi/llm.py          the PyTorch LLM: greedy unless the sampler switch is set; [] from idle get_stats
    sampling_params.py     greedy = top_k and top_p unset (temperature plays no part); no range checks
    _tensorrt_engine/      the TensorRT-engine LLM
    commands/build.py      trtllm-build (bin/trtllm-build runs it)
    commands/serve.py      trtllm-serve --backend pytorch|trt|_autodeploy
"""

from trtllm_fake_core.executor import FAIL_TOKEN, INSTANCES  # noqa: F401 - test hooks, not TensorRT-LLM API
from trtllm_fake_core.lora import adapter_offset  # noqa: F401 - test hook
from trtllm_fake_core.toy_model import reference_greedy  # noqa: F401 - test hook

from tensorrt_llm.llmapi import LLM
from tensorrt_llm.sampling_params import SamplingParams

__version__ = "1.0.0"
__all__ = ["LLM", "SamplingParams"]
