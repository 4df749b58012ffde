"""tensorrt_llm/llmapi/llm.py as of 1.2: `LLM` is the PyTorch backend's (_TorchLLM)."""

from trtllm_fake_core.executor import FakeLLM

from tensorrt_llm.llmapi.llm_args import TorchLlmArgs, TrtLlmArgs
from tensorrt_llm.sampling_params import SamplingParams


class LLM(FakeLLM):
    args_model = TorchLlmArgs
    sampling_params_cls = SamplingParams
    # get_stats while idle is not pinned for 1.2 (fact sheet 10, "Not pinned"): this fake waits up to
    # `timeout` for the first iteration, then drains what is there, as the method's docstring describes.
    idle_stats_at_once = False

    def check_args(self, kwargs: dict) -> None:
        # _TorchLLM._validate_args_for_torch_backend: TensorRT-only args name the other LLM class
        trt_only = set(TrtLlmArgs.model_fields) - set(TorchLlmArgs.model_fields)
        if set(kwargs) & trt_only:
            raise ValueError(
                f"The following arguments are specific to TensorRT backend and cannot be used with PyTorch backend: "
                f"{sorted(set(kwargs) & trt_only)}. Please use 'from tensorrt_llm._tensorrt_engine import LLM' instead"
            )
