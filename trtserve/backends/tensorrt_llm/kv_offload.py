"""The `kv_offload` engine option on TensorRT-LLM: its KV cache manager's secondary (host) pool.

`KvCacheConfig` (llmapi, 1.0 to main; the binding's `host_cache_size`, `secondary_offload_min_priority`):
with `host_cache_size` bytes of pinned host memory, blocks evicted from the GPU pool are offloaded there
instead of dropped, and a later prefix hit copies them back. That copy-back was the `onboard_blocks`
switch, default True, in 1.0-1.2; main removed the field (PR #12449) and KvCacheConfig refuses unknown
fields, so it is never written: the default is what trtserve wants on every release. Only reusable blocks
are kept, so it needs KV block reuse. The tier lives in host memory for the life of the executor: there
is no file and nothing persists across restarts.
"""

from __future__ import annotations

from trtserve.engine.errors import UserError
from trtserve.engine.kv_offload import KVOffloadConfig


def host_tier(cfg: KVOffloadConfig, block_reuse: bool) -> dict:
    """`kv_cache_config` fields for `cfg`; UserError for what TensorRT-LLM's host pool cannot do."""
    if cfg.path is not None:
        raise UserError(
            f"kv_offload.path {cfg.path} cannot be honoured on TensorRT-LLM: its second KV tier is pinned host "
            "memory (kv_cache_config.host_cache_size) that does not persist; remove kv_offload.path, or serve "
            "a torch engine dir to keep the tier in a file"
        )
    if not block_reuse:
        raise UserError(
            "kv_offload needs KV block reuse on TensorRT-LLM (only reusable blocks are offloaded), but it is off: "
            "set enable_prefix_caching: true, or (TensorRT engines) rebuild so paged context FMHA stays on"
        )
    # secondary_offload_min_priority left unset: every evicted block may go to the host pool;
    # onboard_blocks left to its default (True in 1.0-1.2; gone on main, where blocks always come back)
    return {"host_cache_size": int(cfg.bytes)}
