"""tensorrt_llm/llmapi/llm.py as of 1.0: `LLM` is the PyTorch backend's (_TorchLLM)."""

from trtllm_fake_core.executor import FakeLLM
from trtllm_fake_core.facts import FACTS

from tensorrt_llm.llmapi.llm_args import TorchLlmArgs, TrtLlmArgs
from tensorrt_llm.sampling_params import SamplingParams


class LLM(FakeLLM):
    args_model = TorchLlmArgs
    sampling_params_cls = SamplingParams
    # GenerationExecutor.get_stats (tensorrt_llm/executor/executor.py, 1.0): [] at once before the first
    # request and after an idle timeout until the next one; a gap of `timeout` ends a drain.
    facts = FACTS["1.0"]

    def honours_sampling(self) -> bool:
        # tensorrt_llm/_torch/pyexecutor/_util.py (1.0), instantiate_sampler: TorchSampler without the
        # mixed sampler decodes greedily whatever the request's SamplingParams say
        return self.llm_args.enable_trtllm_sampler or self.llm_args.enable_mixed_sampler

    def check_args(self, kwargs: dict) -> None:
        # _TorchLLM._validate_args_for_torch_backend: TensorRT-only args name the other LLM class
        trt_only = set(TrtLlmArgs.model_fields) - set(TorchLlmArgs.model_fields)
        if set(kwargs) & trt_only:
            raise ValueError(
                f"The following arguments are specific to TensorRT backend and cannot be used with PyTorch backend: "
                f"{sorted(set(kwargs) & trt_only)}. Please use 'from tensorrt_llm._tensorrt_engine import LLM' instead"
            )
