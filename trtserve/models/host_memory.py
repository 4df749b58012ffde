"""Host memory on CPU for weights and the KV cache: anonymous private maps. The weights' map is aligned to
2 MB and turned into huge pages, so the decode GEMV's weight streams take one TLB entry per 2 MB instead of
one per 4 KB. That happens once the model is ready (its server warmed up, its LLM built: `collapse_pending`),
on a background thread (MADV_COLLAPSE): huge pages taken at fault time made the kernel compact memory inside
the load (2-3 s for 0.5 GB here), and a collapse beside the warm-up step slowed it as much, so start-up pays
nothing and the weights are on huge pages a few seconds after. The KV cache's map is not advised: it fills
while serving, and a huge page's fault would land inside a step (docs/performance.md has the figures).
Where the kernel has no THP (or no MADV_COLLAPSE, before Linux 6.1), the weights stay on 4 KB pages or
are left to khugepaged."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import math
import mmap
import threading

import torch

HUGE = 2 << 20  # x86-64's transparent huge page
ALIGN = 64  # each tensor starts on a cache line
MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25  # <sys/mman.h> (Python's mmap module lacks MADV_COLLAPSE)
COLLAPSE_STEP = 32 << 20  # madvise calls of this many bytes: the map's lock is never held for long

log = logging.getLogger(__name__)
_pending: list[tuple[mmap.mmap, int, int]] = []  # maps `move` filled, not yet collapsed: (map, address, bytes)
_collapsing: list[threading.Thread] = []  # the background collapses started (tests join them)
_lock = threading.Lock()


def _collapse(buf: mmap.mmap, address: int, nbytes: int) -> None:
    """Advise [address, address + nbytes) of buf as huge pages and collapse it into them now (ctypes drops the
    GIL); buf, held here, stays mapped until this returns."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    for at in range(address, address + nbytes, COLLAPSE_STEP):
        n = ctypes.c_size_t(min(COLLAPSE_STEP, address + nbytes - at))
        if libc.madvise(ctypes.c_void_p(at), n, MADV_HUGEPAGE) or libc.madvise(ctypes.c_void_p(at), n, MADV_COLLAPSE):
            log.debug("weights stay on 4 KB pages from %#x: madvise errno %d", at, ctypes.get_errno())
            return  # THP off, or a kernel before 6.1 (khugepaged may still collapse the advised part)


def collapse_pending() -> None:
    """Collapse the weights `move` has filled so far into huge pages, on a background thread."""
    with _lock:
        regions, _pending[:] = list(_pending), []
        if not regions:
            return
        t = threading.Thread(target=lambda: [_collapse(*r) for r in regions], name="weights-thp", daemon=True)
        _collapsing[:] = [x for x in _collapsing if x.is_alive()] + [t]
    t.start()


def collapse_done(timeout: float | None = None) -> None:
    """Wait for the background collapses started so far."""
    for t in list(_collapsing):
        t.join(timeout)


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
    `collapse_pending`; the map lives while any of the tensors does (and until it is collapsed)."""
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
