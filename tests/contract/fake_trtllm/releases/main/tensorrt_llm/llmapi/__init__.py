"""tensorrt_llm/llmapi/__init__.py (main): the LLM and the config classes trtserve builds."""

from trtllm_fake_core.args import CudaGraphConfig  # noqa: F401
from trtllm_fake_core.executor import RequestError  # noqa: F401
from trtllm_fake_core.guided import GuidedDecodingParams  # noqa: F401

from tensorrt_llm._torch.peft.lora.config import LoraConfig  # noqa: F401
from tensorrt_llm.executor.request import LoRARequest  # noqa: F401
from tensorrt_llm.llmapi.llm import LLM  # noqa: F401
from tensorrt_llm.llmapi.llm_args import (  # noqa: F401
    DraftTargetDecodingConfig,
    Eagle3DecodingConfig,
    EagleDecodingConfig,
    KvCacheConfig,
    MTPDecodingConfig,
    NGramDecodingConfig,
)
