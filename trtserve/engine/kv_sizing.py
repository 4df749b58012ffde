"""How many KV-cache blocks an engine gets: one rule for `trtserve run`, `trtserve.LLM` and
`trtserve inspect`, so that they report the same numbers for the same budget.

- `kv_cache_memory` set: that many bytes, whatever the device.
- CUDA: `kv_cache_free_memory_fraction` of free GPU memory (as TensorRT-LLM does), never more than
  `max_batch_size` full-length sequences need.
- CPU: the smallest of `kv_cache_cpu_memory` (4 GiB by default), what `max_batch_size` full-length
  sequences need, and `kv_cache_free_memory_fraction` of available memory. A CPU host is usually
  shared with other processes, so taking a share of whatever is free is the wrong default there
  (vLLM's CPU backend has a fixed 4 GiB for the same reason).
"""

from __future__ import annotations

from dataclasses import dataclass

from trtserve.engine.errors import UserError
from trtserve.engine.layout import EngineBuildConfig
from trtserve.engine.model_config import ModelConfig
from trtserve.engine.run_config import RuntimeConfig

HOW_TO_CHANGE = "set --kv-cache-memory (engine.kv_cache_memory in the run config) to change it"


def check_kv_cache_dtype(m: ModelConfig, value: str) -> None:
    """The kv_cache_dtype engine option against an engine's config: a 16-bit cache under a float32 engine (or the
    engine's own dtype), and no 8-bit cache format built in. One check for run's start, the model and inspect."""
    if value == "auto":
        return
    algo = m.quantization.kv_cache_quant_algo
    if algo:
        raise UserError(
            f"kv_cache_dtype={value}: this engine was built with an 8-bit KV cache ({algo}), which sets its cache "
            "dtype; remove kv_cache_dtype, or rebuild the engine without --kv-cache-quant"
        )
    if value != m.dtype and m.dtype != "float32":
        raise UserError(
            f"kv_cache_dtype={value} applies to float32 engines; this engine is {m.dtype}, and its KV cache is "
            f"{m.dtype} already: remove kv_cache_dtype (or set it to auto)"
        )


@dataclass(frozen=True)
class KVCacheSize:
    num_blocks: int
    tokens_per_block: int
    bytes_per_block: int  # K and V of tokens_per_block tokens, every layer
    blocks_per_sequence: int  # what one max_seq_len sequence needs
    reason: str  # which rule chose the size, in words

    @property
    def num_bytes(self) -> int:
        return self.num_blocks * self.bytes_per_block

    @property
    def num_tokens(self) -> int:
        return self.num_blocks * self.tokens_per_block

    @property
    def full_length_sequences(self) -> int:
        return self.num_blocks // self.blocks_per_sequence

    def describe(self) -> str:
        """One line for the start-up log: what was taken, why, and how to change it."""
        return (
            f"KV cache: {self.num_blocks} blocks of {self.tokens_per_block} tokens = {self.num_tokens} tokens "
            f"({self.num_bytes / 2**20:.1f} MiB, {self.full_length_sequences} full-length sequences); "
            f"{self.reason}; {HOW_TO_CHANGE}"
        )


def blocks_for(num_tokens: int, tokens_per_block: int) -> int:
    return -(-num_tokens // tokens_per_block)


def size_kv_cache(
    model: ModelConfig,
    build: EngineBuildConfig,
    run: RuntimeConfig,
    *,
    device: str,
    available: int,
    max_batch_size: int,
) -> KVCacheSize:
    """The KV cache for an engine of `model` / `build` under `run`, on `device` ("cpu" or "cuda")
    with `available` bytes free there (GPU memory on CUDA, available RAM on CPU)."""
    bs = build.plugin_config.tokens_per_block
    per_block = model.kv_bytes_per_token(run.kv_cache_dtype) * bs
    per_seq = blocks_for(build.max_seq_len, bs)
    most = max_batch_size * per_seq * per_block  # never useful beyond this
    share = int(available * run.kv_cache_free_memory_fraction)
    fraction = f"{run.kv_cache_free_memory_fraction:g}"
    if run.kv_cache_memory is not None:
        budget, reason = int(run.kv_cache_memory), "the kv_cache_memory given"
    elif device == "cuda":
        budget = min(share, most)
        reason = f"{fraction} of free GPU memory" if share <= most else f"{max_batch_size} full-length sequences"
    else:
        cpu = int(run.kv_cache_cpu_memory)
        budget = min(cpu, most, share)
        reason = (
            f"the CPU default kv_cache_cpu_memory ({cpu / 2**30:g} GiB)"
            if budget == cpu
            else f"what max_batch_size={max_batch_size} full-length sequences need"
            if budget == most
            else f"{fraction} of the {available / 2**30:.1f} GiB of memory available"
        )
    blocks = budget // per_block
    if blocks < 1:
        raise UserError(
            f"the KV cache budget ({budget} bytes, {reason}) holds no block of {per_block} bytes; "
            "give a larger kv_cache_memory"
        )
    return KVCacheSize(blocks, bs, per_block, per_seq, reason)


def blocks_for_requests(
    requests: list[tuple[int, int]], *, tokens_per_block: int, max_seq_len: int, max_batch_size: int, ceiling: int
) -> int:
    """The KV blocks offline generation sizes its cache to for `requests`, given as
    (prompt tokens + max_tokens, n) each: every sequence rounded up to whole blocks, as many of
    the largest at once as max_batch_size lets run, at most `ceiling` (the device's default size)
    but never less than the largest request needs on its own (else it could never run)."""
    seqs = sorted(
        (blocks_for(min(t, max_seq_len), tokens_per_block) for t, n in requests for _ in range(n)), reverse=True
    )
    largest = max(n * blocks_for(min(t, max_seq_len), tokens_per_block) for t, n in requests)
    return max(min(sum(seqs[:max_batch_size]), ceiling), largest)
