"""TensorRT-LLM iteration stats -> our EngineStats (what /metrics reports).

An iteration-stats dict is `IterationStats.to_json_str()` parsed (camelCase keys, fact sheet 3a),
as `LLM.get_stats()` returns them: numActiveRequests, numQueuedRequests, iter, and
kvCacheStats{maxNumBlocks, freeNumBlocks, usedNumBlocks, tokensPerBlock, allocTotalBlocks,
allocNewBlocks, reusedBlocks, cacheHitRate}. allocTotalBlocks / reusedBlocks are the KV
manager's running totals, so prefix-cache queries and hits are reported in tokens as
blocks x tokensPerBlock: block-granular, unlike the torch engine's exact token counts.
"""

from __future__ import annotations

from trtserve.engine.stats import EngineStats, KVCacheStats, PrefixCacheStats, SchedulerStats


def engine_stats(iteration: dict | None, *, prompt_tokens: int, generated_tokens: int) -> EngineStats:
    """The latest iteration's stats (None before the first iteration) plus the adapter's token counts.

    prompt_tokens / generated_tokens are counted by the adapter from the requests it streamed.
    Not reported by TensorRT-LLM, so always 0 here: cached-but-free blocks, KV waste, preemptions.
    """
    it = iteration or {}
    kv = it.get("kvCacheStats") or {}
    total = int(kv.get("maxNumBlocks", 0))
    used = int(kv.get("usedNumBlocks", 0))
    per_block = int(kv.get("tokensPerBlock", 0))
    return EngineStats(
        scheduler=SchedulerStats(
            running=int(it.get("numActiveRequests", 0)),
            waiting=int(it.get("numQueuedRequests", 0)),
            prompt_tokens=prompt_tokens,
            generated_tokens=generated_tokens,
            steps=int(it["iter"]) + 1 if "iter" in it else 0,
        ),
        kv_cache=KVCacheStats(
            blocks_total=total,
            blocks_used=used,
            blocks_free=int(kv.get("freeNumBlocks", total - used)),
            utilization=used / total if total else 0.0,
        ),
        prefix_cache=PrefixCacheStats(
            queries=int(kv.get("allocTotalBlocks", 0)) * per_block,
            hits=int(kv.get("reusedBlocks", 0)) * per_block,
        ),
    )


def decode(stats: list) -> list[dict]:
    """The iteration stats `get_stats` drained, as dicts (releases give dicts or JSON strings)."""
    import json

    return [json.loads(s) if isinstance(s, str) else s for s in stats]
