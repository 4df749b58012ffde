"""The W4A16 decode kernel (`int4_gemm.c`): compiled on first use with the system C compiler into
the user's cache, loaded with ctypes, and skipped (torch's own int4 GEMM runs instead) where the CPU
lacks AVX2/FMA or no compiler works.

Measured on this project's AVX2 machine (AMD EPYC Zen 2, 2 threads): `scripts/bench_quant.py` on the
TinyLlama-1.1B shape, batch-1 decode, went from 1.75x to 2.34x the bf16 engine with it; one
5632 x 2048 weight in groups of 64 at one float32 row, 36 ms -> 1 ms (torch's kernel -> this one).

The .so links `libgomp.so.1`, which torch has already loaded by that soname, so its `omp parallel`
runs on torch's OpenMP threads, not a second pool competing for the same cores.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
from functools import cache
from pathlib import Path

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("int4_gemm.c")
FLAGS = ("-O3", "-mavx2", "-mfma", "-fopenmp", "-shared", "-fPIC")
DTYPES = (torch.bfloat16, torch.float32)  # activation (and scale) dtypes the kernel reads
BLOCK_N = 32  # output rows per block of torch's CPU int4 pack


def _cpu_has_avx2_fma() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    return {"avx2", "fma"} <= set(flags)


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trtserve" / "kernels"


def _compile(cc: str, so: Path) -> bool:
    so.parent.mkdir(parents=True, exist_ok=True)
    tmp = so.with_name(f"{so.name}.{os.getpid()}.tmp")
    try:
        done = subprocess.run([cc, *FLAGS, "-o", str(tmp), str(SOURCE)], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("int4 kernel not compiled (%s); using torch's int4 GEMM", e)
        return False
    if done.returncode != 0:
        log.warning("int4 kernel not compiled (%s); using torch's int4 GEMM", done.stderr.strip()[-500:])
        tmp.unlink(missing_ok=True)
        return False
    os.replace(tmp, so)  # atomic: a concurrent process sees the whole library or none
    return True


@cache
def load():
    """The kernel's C function, or None where this machine cannot build or run it."""
    if not _cpu_has_avx2_fma():
        return None
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        log.warning("no C compiler found; W4A16 uses torch's int4 GEMM")
        return None
    tag = hashlib.sha256(SOURCE.read_bytes() + " ".join((cc, *FLAGS)).encode()).hexdigest()[:16]
    so = cache_dir() / f"int4_gemm-{tag}.so"
    if not so.exists() and not _compile(cc, so):
        return None
    fn = ctypes.CDLL(str(so)).trtserve_int4_gemm
    i64, ptr, i32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
    fn.argtypes = [ptr, i32, i64, i64, ptr, i64, ptr, i32, i64, ptr, i32]
    fn.restype = i32
    return fn


def supports(dtype: torch.dtype, out_features: int) -> bool:
    return dtype in DTYPES and out_features % BLOCK_N == 0 and load() is not None


def int4_gemm(
    x: torch.Tensor, packed: torch.Tensor, scales_zeros: torch.Tensor, group_size: int
) -> torch.Tensor | None:
    """(M, K) x, torch's CPU int4 pack of an (N, K) weight and its (K / group, N, 2) scales and
    zeros (in x's dtype) -> (M, N) in x's dtype; None if the kernel could not run."""
    m, k = x.shape
    n = scales_zeros.shape[1]
    y = torch.empty(m, n, dtype=x.dtype)
    bf16 = int(x.dtype == torch.bfloat16)
    rc = load()(
        x.data_ptr(), bf16, m, k, packed.data_ptr(), n, scales_zeros.data_ptr(), bf16, group_size,
        y.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
    return y if rc == 0 else None
