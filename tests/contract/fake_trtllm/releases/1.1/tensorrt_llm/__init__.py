"""Fake TensorRT-LLM 1.1 (1.1.0 released 2025-12-19): the slice of its API trtserve's
adapter calls, behaving as 1.1's source does (fact sheets 10-11; facts.py's row). Layout as upstream's tensorrt_llm/:

    __init__.py            LLM, SamplingParams, __version__                  (tensorrt_llm/__init__.py)
    llmapi/llm_args.py     TorchLlmArgs with sampler_type (no enable_trtllm_sampler), TrtLlmArgs
    llmapi/llm.py          the PyTorch LLM: honours per-request sampling settings
    sampling_params.py     greedy = temperature 0, top_k 1, top_p 0 or nothing set; range checks
    _tensorrt_engine/      the TensorRT-engine LLM
    commands/build.py      trtllm-build (bin/trtllm-build runs it)
    commands/serve.py      trtllm-serve --backend pytorch|tensorrt|_autodeploy (no trt alias: not pinned)
    _torch/virtual_memory  ExecutorMemoryType (sleep with enable_sleep)
Differs from 1.2 in: top-k logprobs that may leave the sampled token out (PR #9374 came later), the
draft model field `speculative_model_dir` (no `speculative_model` yet), trtllm-serve without aliases.
"""

from trtllm_fake_core.executor import FAIL_TOKEN, INSTANCES  # noqa: F401 - test hooks, not TensorRT-LLM API
from trtllm_fake_core.lora import adapter_offset  # noqa: F401 - test hook
from trtllm_fake_core.toy_model import reference_greedy  # noqa: F401 - test hook

from tensorrt_llm.llmapi import LLM
from tensorrt_llm.sampling_params import SamplingParams

__version__ = "1.1.0"
__all__ = ["LLM", "SamplingParams"]
