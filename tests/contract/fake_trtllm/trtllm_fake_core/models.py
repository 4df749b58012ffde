"""What the fakes' PyTorch backend loads, and the KV blocks its prefix reuse matches.

check_architecture imitates tensorrt_llm/_torch/models/modeling_auto.py (AutoModelForCausalLM): an
architecture no `@register_auto_model` names raises ValueError("Unknown architecture ..."); an MXFP4
checkpoint (config.json `quantization_config.quant_method: mxfp4`) loads only where its model has MXFP4
MoE weights (facts.py `mxfp4_models`).

BlockPool imitates the KV cache manager's reuse tree: a full block is keyed by its token prefix and the
request's cache salt (`hashV1BlockKey(tokens, parent_hash, lora_task_id, cache_salt_id)`). Sleep with the
kv_cache tag releases the pool's memory under RestoreMode.NONE (main's _torch/virtual_memory.py), and
wakeup materializes it again without contents, but the tree keeps its keys: a later request that matches
one reads garbage. The fake marks such a request `stale`, and it decodes other tokens than the model's.
"""

from __future__ import annotations

KV_CACHE_TAG = "kv_cache"  # ExecutorMemoryType.KV_CACHE's value


def check_architecture(cfg: dict, facts) -> None:
    """ValueError as upstream's model loader raises it for a checkpoint this release cannot load."""
    archs = cfg.get("architectures") or []
    arch = next((a for a in archs if a in facts.pytorch_models), None)
    if arch is None:
        raise ValueError(f"Unknown architecture for AutoModelForCausalLM: {archs[0] if archs else None}")
    quant = cfg.get("quantization_config") or {}
    if quant.get("quant_method") == "mxfp4" and arch not in facts.mxfp4_models:
        raise ValueError(f"MXFP4 weights are not supported for {arch} in TensorRT-LLM {facts.version}")


class BlockPool:
    def __init__(self, tokens_per_block: int, reuse: bool):
        self.tokens_per_block, self.reuse = tokens_per_block, reuse
        self.alloc_total = self.reused = 0
        self._blocks: dict[tuple, bool] = {}  # (salt, token prefix) -> its contents were lost in a sleep

    def account(self, prompt: list[int], salt: str | None) -> bool:
        """Allocate the prompt's full blocks, reusing matches; True if a reused block had lost its contents."""
        stale = False
        for b in range(len(prompt) // self.tokens_per_block):
            key = (salt, tuple(prompt[: (b + 1) * self.tokens_per_block]))
            self.alloc_total += 1
            if self.reuse and key in self._blocks:
                self.reused += 1
                stale = stale or self._blocks[key]
            else:
                self._blocks[key] = False  # computed now: valid contents
        return stale

    def release(self, tags) -> None:
        """sleep(tags): the kv_cache pool's contents are gone; its keys stay in the reuse tree."""
        if any(getattr(t, "value", t) == KV_CACHE_TAG for t in tags):
            self._blocks = dict.fromkeys(self._blocks, True)
