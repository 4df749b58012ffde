"""Attention over the paged KV cache, built by trtserve/kernels/native.py: decode rows (one new token a
sequence, `decode_attention.c`) and prompt rows (a prompt or a chunk of one, `prompt_attention.c`), keys and
values read from the cache's blocks instead of gathered into a padded copy. The caller runs its torch path
where `usable` says no or a call returns False."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch

from trtserve.kernels import native

SOURCE = Path(__file__).with_name("decode_attention.c")
PROMPT_SOURCE = Path(__file__).with_name("prompt_attention.c")
DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


@cache
def load():
    """The kernel's C function, or None where this machine cannot build or run it."""
    # q, k, v, dt, kdt, G, n_kv, group, hd, tables, n_blk, kv_lens, rows, bs, scale, window, cap, sinks, out, threads
    return native.function(SOURCE, "trtserve_decode_attention", "pppiillllplpplflfppi")


@cache
def load_prompt():
    """The prompt kernel's C function, or None where this machine cannot build or run it."""
    # q, k, v, dt, kdt, G, n_kv, group, hd, tables, n_blk, kv_lens, q_start, q_lens, bs, scale, window, cap, sinks,
    # out, threads
    return native.function(PROMPT_SOURCE, "trtserve_prompt_attention", "pppiillllplppplflfppi")


def usable(q: torch.Tensor, keys: torch.Tensor) -> bool:
    """q (T, heads, head_dim) and one layer's keys (slots, kv_heads, head_dim) as the cache stores them, on
    CPU: in q's float dtype, or 16-bit under a float32 q (read widened, as the torch path widens them)."""
    return (
        q.device.type == "cpu"
        and q.dtype in DTYPES
        and (keys.dtype == q.dtype or (q.dtype == torch.float32 and keys.dtype in (torch.bfloat16, torch.float16)))
        and q.shape[-1] % 8 == 0
        and keys.is_contiguous()
        and load() is not None
    )


def decode_attention(
    q: torch.Tensor,  # (T, n_kv * group, hd), row rows[g] is sequence g's one query token
    keys: torch.Tensor,  # (slots, n_kv, hd)
    values: torch.Tensor,  # (slots, n_kv, hd)
    block_tables: torch.Tensor,  # (G, n_blk) int64
    kv_lens: torch.Tensor,  # (G,) int64: keys each sequence attends (its cached tokens and the new one)
    rows: torch.Tensor,  # (G,) int64
    tokens_per_block: int,
    scale: float,
    out: torch.Tensor,  # (T, n_kv * group * hd): rows[g] is written
    window: int | None = None,  # keys within this many positions of the query; None: every key
    softcap: float | None = None,  # scores become softcap * tanh(scores / softcap)
    sinks: torch.Tensor | None = None,  # (n_kv * group,) float32: each head's logit joining its softmax
) -> bool:
    """softmax(q k^T * scale) v for each sequence's token, written into `out`; False if the kernel
    could not run (nothing was written)."""
    if sinks is not None and not (sinks.dtype == torch.float32 and sinks.is_contiguous()):
        return False
    q = q.contiguous()
    tables, lens, rows = (t.contiguous() for t in (block_tables, kv_lens, rows))
    n_kv, hd = keys.shape[1], keys.shape[2]
    rc = load()(
        q.data_ptr(), keys.data_ptr(), values.data_ptr(), DTYPES[q.dtype], DTYPES[keys.dtype], tables.shape[0], n_kv,
        q.shape[1] // n_kv, hd, tables.data_ptr(), tables.shape[1], lens.data_ptr(), rows.data_ptr(),
        tokens_per_block, scale, window or 0, softcap or 0.0, None if sinks is None else sinks.data_ptr(),
        out.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
    return rc == 0


def prompt_attention(
    q: torch.Tensor,  # (T, n_kv * group, hd): sequence g's rows q_start[g] .. q_start[g] + q_lens[g] - 1
    keys: torch.Tensor,  # (slots, n_kv, hd), these rows' keys already written
    values: torch.Tensor,  # (slots, n_kv, hd)
    block_tables: torch.Tensor,  # (G, n_blk) int64
    kv_lens: torch.Tensor,  # (G,) int64: keys of each sequence after this step; its rows are the last q_lens[g]
    q_start: torch.Tensor,  # (G,) int64
    q_lens: torch.Tensor,  # (G,) int64
    tokens_per_block: int,
    scale: float,
    out: torch.Tensor,  # (T, n_kv * group * hd): the sequences' rows are written
    window: int | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
) -> bool:
    """Causal softmax(q k^T * scale) v of each sequence's new rows over its cached and new keys, written into
    `out`; False if the kernel could not run (the caller's torch path then writes every row)."""
    fn = load_prompt()
    if fn is None or (sinks is not None and not (sinks.dtype == torch.float32 and sinks.is_contiguous())):
        return False
    q = q.contiguous()
    tables, lens, start, rows = (t.contiguous() for t in (block_tables, kv_lens, q_start, q_lens))
    n_kv, hd = keys.shape[1], keys.shape[2]
    rc = fn(
        q.data_ptr(), keys.data_ptr(), values.data_ptr(), DTYPES[q.dtype], DTYPES[keys.dtype], tables.shape[0], n_kv,
        q.shape[1] // n_kv, hd, tables.data_ptr(), tables.shape[1], lens.data_ptr(), start.data_ptr(),
        rows.data_ptr(), tokens_per_block, scale, window or 0, softcap or 0.0,
        None if sinks is None else sinks.data_ptr(), out.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
    return rc == 0
