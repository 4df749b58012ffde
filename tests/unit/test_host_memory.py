"""Host memory for CPU weights and the KV cache (models/host_memory.py): weights copied into one map,
collapsed into huge pages where the kernel has them, values, dtypes and shapes unchanged; the KV cache in private
anonymous memory that costs nothing until written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from trtserve.models import host_memory

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
COLLAPSE = tuple(int(x) for x in os.uname().release.split(".")[:2] if x.isdigit()) >= (6, 1)  # MADV_COLLAPSE


def _smaps_entry(address: int) -> dict[str, str]:
    """The /proc/self/smaps fields of the mapping holding address."""
    entry, inside = {}, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside:
            key, _, value = line.partition(":")
            entry[key] = value.strip()
    return entry


def test_move_keeps_every_tensor_and_frees_the_source():
    src = {
        "w": torch.randn(1024, 1100),
        "bf": torch.randn(3, 7).to(torch.bfloat16),
        "ids": torch.arange(5),
        "t": torch.randn(6, 4).t(),  # not contiguous
        "empty": torch.empty(0, 3),
    }
    ref = {k: v.clone() for k, v in src.items()}
    out = host_memory.move(src)
    assert src == {}  # freed as copied: the peak is one copy plus a tensor
    for k, v in ref.items():
        assert out[k].dtype == v.dtype and out[k].shape == v.shape and torch.equal(out[k], v)
        assert out[k].numel() == 0 or out[k].data_ptr() % host_memory.ALIGN == 0


@pytest.mark.skipif(not THP.exists() or "[never]" in THP.read_text(), reason="transparent huge pages are off")
@pytest.mark.skipif(not COLLAPSE, reason="MADV_COLLAPSE needs Linux 6.1")
def test_moved_weights_sit_on_huge_pages():
    while host_memory.collapse_next():  # what other tests' engines left
        pass
    out = host_memory.move({"w": torch.randn(4 << 20)})  # 16 MB
    assert out["w"].data_ptr() % host_memory.HUGE == 0
    if "[madvise]" in THP.read_text():  # (with THP always, the kernel hands huge pages out at fault time)
        assert int(_smaps_entry(out["w"].data_ptr())["AnonHugePages"].split()[0]) == 0  # not inside the load
    assert host_memory.collapse_next()  # one idle turn of the engine loop: one huge page, more to come
    assert int(_smaps_entry(out["w"].data_ptr())["AnonHugePages"].split()[0]) == 2 << 10  # kB
    while host_memory.collapse_next():
        pass
    assert int(_smaps_entry(out["w"].data_ptr())["AnonHugePages"].split()[0]) >= 8 << 10
    assert not host_memory.collapse_next()  # nothing left: the loop goes back to waiting


def _rss_anon_kb() -> int:
    return int(
        next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("RssAnon")).split()[1]
    )


def test_zeros_are_private_lazy_and_zero():
    before = _rss_anon_kb()
    z = host_memory.zeros((64, 1 << 18), torch.float32)  # 64 MB
    assert _rss_anon_kb() - before < 8 << 10  # untouched: no memory yet
    z.fill_(1.0)
    assert _rss_anon_kb() - before >= 60 << 10  # counted as private anonymous memory (a shared map is shmem)
    assert z.sum().item() == 64 * (1 << 18)
    assert host_memory.zeros((0, 4), torch.float32).shape == (0, 4)
