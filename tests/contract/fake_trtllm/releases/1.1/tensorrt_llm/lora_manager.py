"""tensorrt_llm/lora_manager.py (1.1): re-exports LoraConfig (where the release's examples import it from)."""

from trtllm_fake_core.lora import LORA_MODULE_IDS

from tensorrt_llm.lora_helper import LoraConfig  # noqa: F401


class LoraManager:
    LORA_MODULE_IDS = dict.fromkeys(LORA_MODULE_IDS)
