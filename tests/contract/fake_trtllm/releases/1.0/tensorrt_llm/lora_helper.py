"""tensorrt_llm/lora_helper.py (1.0): LoraConfig is a dataclass, so an unknown keyword is a TypeError."""

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

    def __post_init__(self):
        assert self.lora_ckpt_source in ["hf", "nemo"], (
            f"lora_ckpt_source must be one of 'hf' or 'nemo', got {self.lora_ckpt_source}"
        )
