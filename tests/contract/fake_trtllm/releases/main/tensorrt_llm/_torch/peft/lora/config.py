"""tensorrt_llm/_torch/peft/lora/config.py on main: LoraConfig is a pydantic StrictBaseModel (an unknown
field raises ValidationError), exported as tensorrt_llm.llmapi.LoraConfig."""

from typing import Literal

from pydantic import Field
from trtllm_fake_core.args import StrictBaseModel


class LoraConfig(StrictBaseModel):
    lora_dir: list[str] = Field(default_factory=list)
    lora_ckpt_source: Literal["hf", "nemo"] = "hf"
    max_lora_rank: int = 64
    lora_target_modules: list[str] = Field(default_factory=list)
    trtllm_modules_to_hf_modules: dict[str, str] = Field(default_factory=dict)
    max_loras: int | None = None
    max_cpu_loras: int | None = None
    swap_gate_up_proj_lora_b_weight: bool = True
    overlap_lora_and_base: bool = False
    cuda_graph_specialize_lora: bool = False
