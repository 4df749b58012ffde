"""LoRA as TensorRT-LLM 1.0 to main has it: module names, LoRARequest, and the adapter cache by id.

Imitates tensorrt_llm/lora_helper.py (get_default_trtllm_modules_to_hf_modules; LoraConfig, whose
class each release defines itself), tensorrt_llm/lora_manager.py (LoraManager.LORA_MODULE_IDS, the
trtllm-build choices; load_from_ckpt reads a PEFT dir's adapter_config.json) and
tensorrt_llm/executor/request.py (LoRARequest: lora_path must exist). TensorRT-LLM caches an
adapter's weights by lora_int_id: a second request with that id is served from the cache, whatever
its lora_path says now. The toy "weights" are an offset added to each greedy token (toy_model.py).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

LORA_MODULE_IDS = (  # lora_manager.py LoraManager.LORA_MODULE_IDS keys
    "attn_qkv",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_dense",
    "mlp_h_to_4h",
    "mlp_4h_to_h",
    "mlp_gate",
    "cross_attn_qkv",
    "cross_attn_q",
    "cross_attn_k",
    "cross_attn_v",
    "cross_attn_dense",
    "moe_h_to_4h",
    "moe_4h_to_h",
    "moe_gate",
    "moe_router",
    "mlp_router",
    "mlp_gate_up",
)
DEFAULT_TRTLLM_TO_HF = {  # lora_helper.py get_default_trtllm_modules_to_hf_modules (dense part)
    "attn_q": "q_proj",
    "attn_k": "k_proj",
    "attn_v": "v_proj",
    "attn_dense": "o_proj",
    "mlp_h_to_4h": "gate_proj",
    "mlp_4h_to_h": "down_proj",
    "mlp_gate": "up_proj",
    "mlp_gate_up": "gate_up_proj",
}


@dataclass(slots=True)
class LoRARequest:
    """executor/request.py (1.0 to main)."""

    lora_name: str
    lora_int_id: int
    lora_path: str = ""
    lora_ckpt_source: str = "hf"

    def __post_init__(self):
        if self.lora_path is not None and not os.path.exists(self.lora_path):
            raise ValueError(f"lora_path ({self.lora_path}) does not exist.")


def adapter_offset(path: str | Path, vocab: int) -> int:
    """The toy weights of the adapter at `path`: what it adds to each greedy token (test hook)."""
    digest = hashlib.sha256((Path(path) / "adapter_model.safetensors").read_bytes()).digest()
    return int.from_bytes(digest[:4], "little") % (vocab - 1) + 1


def hf_modules(path: str | Path) -> list[str]:
    """The TensorRT-LLM module names a PEFT adapter's target_modules map to (load_hf_lora)."""
    cfg = json.loads((Path(path) / "adapter_config.json").read_text())
    to_trtllm = {hf: m for m, hf in DEFAULT_TRTLLM_TO_HF.items()}
    return [to_trtllm[t.rsplit(".", 1)[-1]] for t in cfg["target_modules"] if t.rsplit(".", 1)[-1] in to_trtllm]


class AdapterCache:
    """The executor's LoRA weights by lora_int_id (PeftCacheManager), filled by the first request of an id."""

    def __init__(self, modules: list[str], max_rank: int, vocab: int):
        self.modules, self.max_rank, self.vocab = modules, max_rank, vocab
        self._by_id: dict[int, int] = {}
        self.loads: list[int] = []  # ids loaded from disk, in order (test hook)

    def offset(self, request: LoRARequest) -> int:
        if request.lora_int_id in self._by_id:
            return self._by_id[request.lora_int_id]
        cfg = json.loads((Path(request.lora_path) / "adapter_config.json").read_text())
        missing = [m for m in hf_modules(request.lora_path) if m not in self.modules]
        if missing:  # the model has no LoRA weights slot for these modules
            raise ValueError(f"LoRA module(s) {missing} are not in lora_target_modules {self.modules}")
        if cfg["r"] > self.max_rank:
            raise ValueError(f"LoRA rank {cfg['r']} exceeds max_lora_rank {self.max_rank}")
        self._by_id[request.lora_int_id] = adapter_offset(request.lora_path, self.vocab)
        self.loads.append(request.lora_int_id)
        return self._by_id[request.lora_int_id]
