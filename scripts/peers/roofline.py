"""The batch-1 decode roofline: weight bytes read per token (for a mixture of experts, the active ones:
every weight but the idle experts') and the memory bandwidth of this machine.

The bandwidth is the best of a STREAM-like read (stream_read.c: every thread sums its share of an
array too big for the caches with independent vector accumulators, as STREAM's read kernels do) and
a 1-row GEMV over a matrix of the same size (torch's and the engine's own): a torch `sum` under-reads
on this machine kind, and a GEMV-only bar let decode exceed its "roofline". Measured in the same
process and run as the benchmark, with the same threads.
"""

from __future__ import annotations

import mmap
import time
from pathlib import Path

import torch

EMBEDDING = "transformer.vocab_embedding.weight"  # the torch engine's names (trtserve/build/layout.py)
LM_HEAD = "lm_head.weight"


def weight_bytes_per_token(engine_dir: Path) -> int:
    """Bytes of weights one decode step reads from the engine's model.safetensors.

    Every tensor is read once per token except the input embedding, of which only one row is read,
    unless it is tied to the output projection (then it is read whole, as the lm_head).
    """
    from safetensors import safe_open

    total, embedding, has_head = 0, 0, False
    with safe_open(str(engine_dir / "model.safetensors"), "pt") as f:
        for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
            sl = f.get_slice(name)
            n = 1
            for d in sl.get_shape():
                n *= d
            nbytes = n * _itemsize(sl.get_dtype())
            total += nbytes
            if name == EMBEDDING:
                embedding = nbytes
            has_head |= name == LM_HEAD
    return total - embedding if has_head else total


def active_weight_bytes_per_token(engine_dir: Path) -> int:
    """Bytes of weights one batch-1 decode step reads: `weight_bytes_per_token` less the idle experts'
    share of the routed experts' tensors (each token reads top_k of num_experts); the same as
    weight_bytes_per_token for a dense engine. The shared expert, the router and attention are read whole."""
    import json

    from safetensors import safe_open

    moe = json.loads((engine_dir / "config.json").read_text())["pretrained_config"].get("moe")
    total = weight_bytes_per_token(engine_dir)
    if not moe:
        return total
    experts = 0
    with safe_open(str(engine_dir / "model.safetensors"), "pt") as f:
        for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
            if ".mlp.experts." in name:  # (num_experts, out, in) stacks and their per-expert scales
                sl = f.get_slice(name)
                n = 1
                for d in sl.get_shape():
                    n *= d
                experts += n * _itemsize(sl.get_dtype())
    e, k = moe["num_experts"], moe["top_k"]
    return total - experts * (e - k) // e


def _itemsize(dtype: str) -> int:
    return {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I8": 1, "U8": 1, "F8_E4M3": 1, "I32": 4, "I64": 8}[dtype]


def gemv_bandwidth(nbytes: int, dtype: torch.dtype = torch.float32, reps: int = 7, device: str = "cpu") -> float:
    """Bytes/s of y = W x for one row x over a (rows, 4096) weight of about `nbytes`: the best of
    torch's `linear` and, on a CPU, the torch engine's decode kernel (trtserve/kernels/dense.py), each
    the fastest of `reps` reads (a roofline is the best the memory gives: on a shared host the median
    read fell below what the engine's own decode then reached, a fraction of roofline above 1). On
    CUDA each read is timed to its end."""
    from trtserve.kernels import dense

    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    cols = 4096
    elem = torch.empty((), dtype=dtype).element_size()
    rows = max(1, nbytes // (cols * elem))
    w = torch.randn(rows, cols, dtype=torch.float32).to(dev, dtype)  # (rows, cols)
    x = torch.randn(1, cols, dtype=torch.float32).to(dev, dtype)  # (1, cols)
    best = 0.0
    for linear in (torch.nn.functional.linear, dense.linear) if dev.type == "cpu" else (torch.nn.functional.linear,):
        times = []
        with torch.inference_mode():
            linear(x, w)  # first touch and kernel selection
            sync()
            for _ in range(reps):
                t = time.perf_counter()
                linear(x, w)
                sync()
                times.append(time.perf_counter() - t)
        best = max(best, w.numel() * elem / min(times))
    return best


def stream_bandwidth(nbytes: int, reps: int = 7) -> float | None:
    """Bytes/s of the STREAM-like read over a float32 array of about `nbytes` (the fastest of `reps`);
    None where the C kernel cannot be built here (no AVX2 or no compiler)."""
    from trtserve.kernels import native

    read = native.function(Path(__file__).with_name("stream_read.c"), "stream_read", "plp")
    if read is None:
        return None
    n = max(nbytes // 4 // 512, 1) * 512  # floats, a multiple of the kernel's four streams x step
    buf = mmap.mmap(-1, n * 4)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        buf.madvise(mmap.MADV_HUGEPAGE)  # large pages where the kernel grants them: fewer TLB misses
    a = torch.frombuffer(buf, dtype=torch.float32)
    a.fill_(1.0)  # every page mapped before timing
    out = torch.zeros(1, dtype=torch.float32)
    read(a.data_ptr(), n, out.data_ptr())  # warm-up: threads started
    best = 0.0
    for _ in range(reps):
        t = time.perf_counter()
        read(a.data_ptr(), n, out.data_ptr())
        best = max(best, n * 4 / (time.perf_counter() - t))
    return best


def beyond_caches() -> int:
    """Bytes comfortably larger than the last-level cache (4x; at least 1 GiB). Some machines of
    this kind have a 480 MiB L3, where a 512 MiB matrix is still half cached."""
    unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    largest = 0
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip()  # e.g. "480M"
        if text[-1:] in unit and text[:-1].isdigit():
            largest = max(largest, int(text[:-1]) * unit[text[-1]])
    return max(4 * largest, 1 << 30)


def bandwidths(per_token: int, dtype: torch.dtype, device: str = "cpu") -> dict[str, float]:
    """Bytes/s by method: the STREAM-like read of the very bytes a decode step reads (on a CPU: whatever
    the caches give decode, they give it too) and 1-row GEMVs beyond the caches in float32 and the
    model's dtype (so a slow low-precision kernel cannot lower the bar)."""
    size = min(max(per_token, beyond_caches()), 4 << 30)  # beyond the caches, within memory
    bws = {"stream": stream_bandwidth(per_token) if device == "cpu" else None}
    bws["gemv float32"] = gemv_bandwidth(size, torch.float32, device=device)
    if dtype != torch.float32:
        bws[f"gemv {str(dtype).removeprefix('torch.')}"] = gemv_bandwidth(size, dtype, device=device)
    return {k: v for k, v in bws.items() if v}


def measure(engine_dir: Path, dtype: torch.dtype) -> dict:
    """Weight bytes per token, the bandwidths by method and the roofline in tokens/s at the best; for a
    mixture of experts the roofline is over the active bytes (`active_weight_bytes_per_token`), and
    `active` says so."""
    per_token = weight_bytes_per_token(engine_dir)
    active = active_weight_bytes_per_token(engine_dir)
    bws = bandwidths(active, dtype)
    bw = max(bws.values())
    out = {"weight_bytes_per_token": per_token}
    if active != per_token:
        out |= {"active": True, "active_weight_bytes_per_token": active}
    return out | {
        "bandwidth_gb_s": {k: round(v / 1e9, 2) for k, v in bws.items()},
        "roofline_tok_per_s": round(bw / active, 2),
    }
