"""The kernel ISA cap: `TRTSERVE_ISA=scalar|avx2|avx512|amx` makes the C kernels, and torch's own CPU
code, dispatch as on the lesser CPU of that level that the project ships on, so one machine runs every
path (docs/performance.md, "CPU paths"):

    amx     Intel Xeon with AVX-512, AVX512-BF16/FP16 and AMX: everything the CPU has (no cap)
    avx512  AMD EPYC with AVX-512 and AVX512-BF16 (Zen 4): the kernels' AVX-512 build, no AMX, no
            AVX512-FP16, MKL at AVX2 (as on AMD CPUs)
    avx2    AMD EPYC with AVX2 only (Zen 2/3): no AVX-512, no AVX-VNNI
    scalar  no C kernels at all: every op is torch's, at its default (non-vector) capability

Unset, nothing is capped. A cap above what the CPU has is clamped to the CPU's level with a warning.
This module imports no torch: `torch_env` must reach the environment before torch first runs a CPU op.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

VAR = "TRTSERVE_ISA"
LEVELS = ("scalar", "avx2", "avx512", "amx")  # lowest first
# The CPU flags (/proc/cpuinfo's names) each level needs to be this machine's level
NEEDS = {
    "scalar": frozenset(),
    "avx2": frozenset({"avx2", "fma", "f16c"}),
    "avx512": frozenset({"avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw", "avx512vl"}),
    "amx": frozenset({"avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw", "avx512vl", "amx_tile", "amx_bf16"}),
}
# Flag prefixes a level hides: the features its shipped CPU lacks
HIDES = {
    "scalar": ("avx", "fma", "f16c", "amx"),
    "avx2": ("avx512", "avx_vnni", "amx"),
    "avx512": ("avx512_fp16", "avx_vnni", "amx"),
    "amx": (),
}
# What torch reads (before its first CPU op) so that its own kernels keep to the level: ATen's vectorised
# ops, oneDNN's (bf16 GEMM: AMX on the native path, AVX512-BF16 under `avx512`, torch's own code under
# `avx2`) and MKL's (float32 GEMM; on AMD CPUs MKL runs its AVX2 code even where AVX-512 is present).
TORCH_ENV = {
    "scalar": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "avx512": {
        "ATEN_CPU_CAPABILITY": "avx512",
        "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    },
    "amx": {},
}
# The vendor the kernels dispatch for under a cap: the levels below AMX are shipped on AMD EPYC
VENDOR = {"avx2": "AuthenticAMD", "avx512": "AuthenticAMD"}


def native_level(flags: frozenset[str]) -> str:
    """The highest level a CPU with these flags runs."""
    return [level for level in LEVELS if NEEDS[level] <= flags][-1]


def requested() -> str | None:
    """TRTSERVE_ISA's level, or None where it is unset or empty."""
    value = os.environ.get(VAR, "").strip().lower()
    if not value:
        return None
    if value not in LEVELS:
        raise ValueError(f"{VAR}={value!r} is not a kernel ISA cap; use one of {', '.join(LEVELS)}, or unset it")
    return value


def level(flags: frozenset[str]) -> str | None:
    """The cap in effect on a CPU with these flags: TRTSERVE_ISA, clamped to the CPU's level; None: no cap."""
    want = requested()
    if want is None:
        return None
    have = native_level(flags)
    if LEVELS.index(want) > LEVELS.index(have):
        log.warning("%s=%s is above this CPU's level; the kernels run at %s", VAR, want, have)
        return have
    return want


def capped(flags: frozenset[str], cap: str | None) -> frozenset[str]:
    """The flags the kernels see under `cap`."""
    if cap is None:
        return flags
    return frozenset(f for f in flags if not f.startswith(HIDES[cap]))


def torch_env(cap: str | None) -> dict[str, str]:
    """The environment that keeps torch's CPU code at `cap`."""
    return dict(TORCH_ENV[cap]) if cap is not None else {}
