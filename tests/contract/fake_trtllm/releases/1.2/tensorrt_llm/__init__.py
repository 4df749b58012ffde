"""Fake TensorRT-LLM 1.2 (1.2.0 released 2026-03-12, 1.2.1 2026-04-20): the slice of its API trtserve's
adapter calls, behaving as 1.2's source does (fact sheet section 10). Layout as upstream's tensorrt_llm/:

    __init__.py            LLM, SamplingParams, __version__                  (tensorrt_llm/__init__.py)
    llmapi/llm_args.py     TorchLlmArgs with sampler_type (no enable_trtllm_sampler), TrtLlmArgs
    llmapi/llm.py          the PyTorch LLM: honours per-request sampling settings
    sampling_params.py     greedy = temperature 0, top_k 1, top_p 0 or nothing set; range checks
    _tensorrt_engine/      the TensorRT-engine LLM
    commands/build.py      trtllm-build (bin/trtllm-build runs it)
    commands/serve.py      trtllm-serve --backend pytorch|tensorrt|_autodeploy (alias trt)
"""

from trtllm_fake_core.executor import FAIL_TOKEN, INSTANCES  # noqa: F401 - test hooks, not TensorRT-LLM API
from trtllm_fake_core.lora import adapter_offset  # noqa: F401 - test hook
from trtllm_fake_core.toy_model import reference_greedy  # noqa: F401 - test hook

from tensorrt_llm.llmapi import LLM
from tensorrt_llm.sampling_params import SamplingParams

__version__ = "1.2.1"
__all__ = ["LLM", "SamplingParams"]
