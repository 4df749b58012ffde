"""tensorrt_llm/llmapi/llm_args.py on main after PR #15918 (pydantic, extra="forbid"): no TrtLlmArgs,
and TorchLlmArgs without sampler_type (removed by PR #18232, Aug 2026)."""

from trtllm_fake_core.args import TorchLlmArgsBase


class TorchLlmArgs(TorchLlmArgsBase):
    pass
