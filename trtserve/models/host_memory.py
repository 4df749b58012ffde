"""Host memory on CPU for weights and the KV cache: anonymous private maps. The weights' map is aligned to
2 MB and turned into huge pages, so the decode GEMV's weight streams take one TLB entry per 2 MB instead of
one per 4 KB (a SmolLM2 float32 decode step 19.2 -> 16.0 ms). The collapse (MADV_COLLAPSE) runs where the
engine would otherwise wait: a server's engine loop takes one piece each time it finds no work, and an LLM
collapses its weights once built. Never beside a step: huge pages taken at fault time made the kernel compact
memory inside the load (2-3 s for 0.5 GB here), and a collapse on a background thread beside the steps made
them up to 17x slower while it ran (its compaction migrates the engine's own pages): a server's first
requests waited seconds. The KV cache's map is not advised: it fills while serving, and a huge page's fault
would land inside a step (docs/performance.md has the figures). Where the kernel has no THP (or no
MADV_COLLAPSE, before Linux 6.1), the weights stay on 4 KB pages or are left to khugepaged."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import math
import mmap
import threading

import torch

HUGE = 2 << 20  # x86-64's transparent huge page
ALIGN = 64  # each tensor starts on a cache line
MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25  # <sys/mman.h> (Python's mmap module lacks MADV_COLLAPSE)
PIECE = HUGE  # what one idle turn of the engine loop collapses: a new request waits for at most one

log = logging.getLogger(__name__)
_pending: list[tuple[mmap.mmap, int, int]] = []  # maps `move` filled, not yet collapsed: (map, address, bytes)
_lock = threading.Lock()


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _collapse(address: int, nbytes: int) -> bool:
    """Advise [address, address + nbytes) as huge pages and collapse it into them now (ctypes drops the GIL);
    False where the kernel cannot (THP off, or a kernel before 6.1)."""
    at, n = ctypes.c_void_p(address), ctypes.c_size_t(nbytes)
    if _libc().madvise(at, n, MADV_HUGEPAGE) or _libc().madvise(at, n, MADV_COLLAPSE):
        log.debug("weights stay on 4 KB pages from %#x: madvise errno %d", address, ctypes.get_errno())
        return False
    return True


def collapse_next(nbytes: int = PIECE) -> bool:
    """Collapse the next nbytes of the weights `move` has filled into huge pages, on this thread; whether any
    remain. Where the kernel cannot, nothing remains (khugepaged may still collapse the advised part)."""
    with _lock:
        if not _pending:
            return False
        buf, address, left = _pending[0]  # buf, held here, stays mapped until its last piece is done
        piece = min(nbytes, left)
        if not _collapse(address, piece):
            _pending.clear()
        elif piece == left:
            _pending.pop(0)
        else:
            _pending[0] = (buf, address + piece, left - piece)
        return bool(_pending)


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
    """The tensors copied into one 2 MB-aligned map, each freed from `tensors` as it is copied (so the peak is
    the map plus one tensor, not two copies of the weights), its pages to be collapsed into huge pages by
    `collapse_next`; the map lives while any of the tensors does (and until it is collapsed)."""
    sizes = {k: v.numel() * v.element_size() for k, v in tensors.items()}
    total = sum(-(-n // ALIGN) * ALIGN for n in sizes.values())
    buf = _map(total + HUGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    at = start = -base % HUGE  # the first 2 MB boundary
    out = {}
    for k in list(tensors):
        t = tensors.pop(k)
        if not sizes[k]:
            out[k] = t
            continue
        view = torch.frombuffer(buf, dtype=torch.uint8, count=sizes[k], offset=at).view(t.dtype).view(t.shape)
        out[k] = view.copy_(t)
        at += -(-sizes[k] // ALIGN) * ALIGN
    if total >= HUGE:
        with _lock:
            _pending.append((buf, base + start, total // HUGE * HUGE))
    return out
