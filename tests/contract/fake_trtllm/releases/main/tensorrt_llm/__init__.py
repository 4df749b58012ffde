"""Fake TensorRT-LLM main after PR #15918 (July 2026; 1.3.0rc22 and later, 1.4.0rc*): the slice of its
API trtserve's adapter calls, behaving as that source does (fact sheet section 10). Layout as upstream:

    __init__.py            LLM, SamplingParams, __version__                  (tensorrt_llm/__init__.py)
    llmapi/llm_args.py     TorchLlmArgs without sampler keys (sampler_type gone, PR #18232); no TrtLlmArgs
    llmapi/llm.py          the PyTorch LLM; backend="tensorrt" raises ValueError
    sampling_params.py     as 1.2
    commands/serve.py      trtllm-serve --backend without tensorrt
There is no _tensorrt_engine, no commands/build.py and no trtllm-build: PR #15918 deleted them
(docs/source/legacy/tensorrt-backend-removal.md).
"""

from trtllm_fake_core.executor import FAIL_TOKEN, INSTANCES  # noqa: F401 - test hooks, not TensorRT-LLM API
from trtllm_fake_core.lora import adapter_offset  # noqa: F401 - test hook
from trtllm_fake_core.toy_model import reference_greedy  # noqa: F401 - test hook

from tensorrt_llm.llmapi import LLM
from tensorrt_llm.sampling_params import SamplingParams

__version__ = "1.4.0rc1"
__all__ = ["LLM", "SamplingParams"]
