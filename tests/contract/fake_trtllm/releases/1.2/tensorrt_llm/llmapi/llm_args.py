"""tensorrt_llm/llmapi/llm_args.py as of 1.2 (pydantic, extra="forbid")."""

from trtllm_fake_core.args import TorchLlmArgsBase, TrtLlmArgsBase


class TorchLlmArgs(TorchLlmArgsBase):
    # Replaced enable_trtllm_sampler / enable_mixed_sampler in 1.1; "auto" is TorchSampler unless beam
    # search is asked for, and it honours each request's sampling settings. Removed on main (PR #18232).
    sampler_type: str = "auto"


class TrtLlmArgs(TrtLlmArgsBase):
    pass
