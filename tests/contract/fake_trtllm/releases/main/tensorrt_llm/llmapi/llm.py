"""tensorrt_llm/llmapi/llm.py on main: `LLM` is the PyTorch backend's; BaseLLM accepts only the
"pytorch" and "_autodeploy" backends (ValueError otherwise) since PR #15918."""

from trtllm_fake_core.executor import FakeLLM
from trtllm_fake_core.facts import FACTS

from tensorrt_llm.llmapi.llm_args import TorchLlmArgs
from tensorrt_llm.sampling_params import SamplingParams


class LLM(FakeLLM):
    args_model = TorchLlmArgs
    sampling_params_cls = SamplingParams
    facts = FACTS["main"]  # get_stats not pinned on main: a drain

    def check_args(self, kwargs: dict) -> None:
        if kwargs.get("backend", "pytorch") not in ("pytorch", "_autodeploy"):
            raise ValueError(
                f"Invalid backend: {kwargs['backend']!r}; the TensorRT backend has been removed, use 'pytorch'"
            )
