"""tensorrt_llm/lora_helper.py (1.1): LoraConfig is a dataclass, so an unknown keyword is a TypeError."""

from dataclasses import dataclass, field


@dataclass
class LoraConfig:
    lora_dir: list[str] = field(default_factory=list)
    lora_ckpt_source: str = "hf"
    max_lora_rank: int = 64
    lora_target_modules: list[str] = field(default_factory=list)
    trtllm_modules_to_hf_modules: dict[str, str] = field(default_factory=dict)
    max_loras: int | None = None
    max_cpu_loras: int | None = None
    # PR #6817 (merged 2025-08-20, before 1.1 branched): whether to swap gate_up_proj.lora_B halves on load
    swap_gate_up_proj_lora_b_weight: bool = True

    def __post_init__(self):
        assert self.lora_ckpt_source in ["hf", "nemo"], (
            f"lora_ckpt_source must be one of 'hf' or 'nemo', got {self.lora_ckpt_source}"
        )
