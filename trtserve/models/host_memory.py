"""Host memory on CPU for weights and the KV cache: anonymous private maps. The weights' map is aligned to
2 MB and advised as huge pages, so the decode GEMV's weight streams take one TLB entry per 2 MB instead of
one per 4 KB; the KV cache's is not, since it fills a page at a time while serving and a huge page's fault
(zeroing 2 MB, compacting memory to find one) then lands inside a step (docs/performance.md has both
figures). Where the kernel grants no huge pages (THP off), the weights' map is ordinary memory."""

from __future__ import annotations

import contextlib
import ctypes
import math
import mmap

import torch

HUGE = 2 << 20  # x86-64's transparent huge page
ALIGN = 64  # each tensor starts on a cache line


def _map(nbytes: int) -> mmap.mmap:
    """Zeroed pages that cost nothing until first written (a shared map would be shmem: no THP, not RssAnon)."""
    return mmap.mmap(-1, max(nbytes, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A zeroed CPU tensor in its own map, untouched pages free; the tensor keeps the map alive."""
    n = math.prod(shape)
    if not n:
        return torch.zeros(shape, dtype=dtype)
    return torch.frombuffer(_map(n * dtype.itemsize), dtype=dtype, count=n).view(shape)


def move(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors copied into one map on huge pages, each freed from `tensors` as it is copied (so the peak
    is the map plus one tensor, not two copies of the weights); the map lives while any of them does."""
    sizes = {k: v.numel() * v.element_size() for k, v in tensors.items()}
    total = sum(-(-n // ALIGN) * ALIGN for n in sizes.values())
    buf = _map(total + HUGE)
    at = start = -ctypes.addressof(ctypes.c_char.from_buffer(buf)) % HUGE  # the first 2 MB boundary
    if hasattr(mmap, "MADV_HUGEPAGE"):
        with contextlib.suppress(OSError):  # THP compiled out: ordinary pages
            buf.madvise(mmap.MADV_HUGEPAGE, start, total + HUGE - start)
    out = {}
    for k in list(tensors):
        t = tensors.pop(k)
        if not sizes[k]:
            out[k] = t
            continue
        view = torch.frombuffer(buf, dtype=torch.uint8, count=sizes[k], offset=at).view(t.dtype).view(t.shape)
        out[k] = view.copy_(t)
        at += -(-sizes[k] // ALIGN) * ALIGN
    return out
