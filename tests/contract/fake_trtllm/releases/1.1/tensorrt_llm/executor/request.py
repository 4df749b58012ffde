"""tensorrt_llm/executor/request.py (1.1): LoRARequest(lora_name, lora_int_id, lora_path, lora_ckpt_source)."""

from trtllm_fake_core.lora import LoRARequest  # noqa: F401
