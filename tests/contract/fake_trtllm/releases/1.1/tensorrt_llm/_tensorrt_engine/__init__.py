"""tensorrt_llm/_tensorrt_engine (1.1): the LLM class for TensorRT engine dirs (llmapi/llm.py _TrtLLM)."""

from trtllm_fake_core.executor import FakeTrtEngineLLM
from trtllm_fake_core.facts import FACTS

from tensorrt_llm.llmapi.llm_args import TrtLlmArgs
from tensorrt_llm.sampling_params import SamplingParams


class LLM(FakeTrtEngineLLM):
    args_model = TrtLlmArgs
    sampling_params_cls = SamplingParams
    facts = FACTS["1.1"]
