"""tensorrt_llm/llmapi/llm_args.py as of 1.0 (pydantic, extra="forbid")."""

from trtllm_fake_core.args import TorchLlmArgsBase, TrtLlmArgsBase


class TorchLlmArgs(TorchLlmArgsBase):
    # instantiate_sampler (tensorrt_llm/_torch/pyexecutor/_util.py, 1.0) uses TRTLLMSampler when this is
    # set, else TorchSampler, which decodes greedily unless enable_mixed_sampler is set. Both removed in 1.1.
    enable_trtllm_sampler: bool = False
    enable_mixed_sampler: bool = False


class TrtLlmArgs(TrtLlmArgsBase):
    pass
