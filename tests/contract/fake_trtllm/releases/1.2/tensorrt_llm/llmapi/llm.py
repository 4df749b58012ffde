"""tensorrt_llm/llmapi/llm.py as of 1.2: `LLM` is the PyTorch backend's (_TorchLLM)."""

from trtllm_fake_core.executor import FakeLLM
from trtllm_fake_core.facts import FACTS

from tensorrt_llm.llmapi.llm_args import TorchLlmArgs, TrtLlmArgs
from tensorrt_llm.sampling_params import SamplingParams


class LLM(FakeLLM):
    args_model = TorchLlmArgs
    sampling_params_cls = SamplingParams
    # get_stats behaves as 1.0's (fact sheet 11.6): [] at once while idle, a drain until a quiet gap
    facts = FACTS["1.2"]

    def check_args(self, kwargs: dict) -> None:
        # _TorchLLM._validate_args_for_torch_backend: TensorRT-only args name the other LLM class
        trt_only = set(TrtLlmArgs.model_fields) - set(TorchLlmArgs.model_fields)
        if set(kwargs) & trt_only:
            raise ValueError(
                f"The following arguments are specific to TensorRT backend and cannot be used with PyTorch backend: "
                f"{sorted(set(kwargs) & trt_only)}. Please use 'from tensorrt_llm._tensorrt_engine import LLM' instead"
            )
