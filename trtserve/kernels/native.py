"""Our C kernels: each `.c` file here is compiled on first use with the system C compiler into the
user's cache and loaded with ctypes. Where the CPU lacks AVX2/FMA or no compiler works, `library`
returns None and the caller runs torch's own op instead. Every choice of path reads the CPU through
`cpu_flags` and `cpu_vendor`, which keep to the ISA cap TRTSERVE_ISA where it is set (isa.py).

Each .so links `libgomp.so.1`, which torch has already loaded by that soname, so the kernels'
`omp parallel` regions run on torch's OpenMP threads, not a second pool competing for the cores.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

from trtserve.kernels import isa

log = logging.getLogger(__name__)

# No fp contraction: scalar a * b + c stays two roundings, as in torch's elementwise ops (the
# kernels' vector FMAs are explicit intrinsics).
FLAGS = ("-O3", "-mavx2", "-mfma", "-mf16c", "-ffp-contract=off", "-fopenmp", "-shared", "-fPIC")
AVX512 = ("-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl")  # the 16-lane GEMM, attention and int4 code
# int4.h's int8-activation path (vpdpbusd, vpermt2b), in the AVX-512 build where the CPU has them
AVX512_INT8 = {"avx512_vnni": "-mavx512vnni", "avx512vbmi": "-mavx512vbmi"}
AVX512_BF16 = {"avx512_bf16": "-mavx512bf16"}  # gemv.h's bf16 dot tile (vdpbf16ps), in the AVX-512 build
AMX_BF16 = {"amx_tile": "-mamx-tile", "amx_bf16": "-mamx-bf16"}  # amx.h's bf16 decode GEMM, in the AVX-512 build


@cache
def cpuinfo(key: str) -> str:
    """The first `key : value` of /proc/cpuinfo ("flags", "vendor_id", "model name"); empty where unknown."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    return next((line.split(":", 1)[1].strip() for line in lines if line.split(":", 1)[0].strip() == key), "")


@cache
def hardware_flags() -> frozenset[str]:
    """The CPU's own feature flags (empty off Linux x86-64), whatever the cap."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return frozenset()
    return frozenset(cpuinfo("flags").split())


@cache
def isa_cap() -> str | None:
    """The ISA cap in effect (isa.LEVELS), clamped to this CPU's level; None where TRTSERVE_ISA is unset."""
    return isa.level(hardware_flags())


@cache
def cpu_flags() -> frozenset[str]:
    """The feature flags the kernels dispatch on: the CPU's, less those above the ISA cap."""
    return isa.capped(hardware_flags(), isa_cap())


def export_torch_env() -> dict[str, str]:
    """Put the environment that keeps torch's CPU code at the ISA cap into os.environ (values already
    set win) and return it; torch reads it at its first CPU op, so call this before. Nothing uncapped."""
    env = {k: os.environ.setdefault(k, v) for k, v in isa.torch_env(isa_cap()).items()}
    return env


def cpu_vendor() -> str:
    """GenuineIntel, AuthenticAMD; empty where unknown. Under a cap below AMX, the vendor of the CPUs
    shipped at that level (isa.VENDOR)."""
    return isa.VENDOR.get(isa_cap(), cpuinfo("vendor_id"))


def cpu_model() -> str:
    """The CPU's model name, for benchmark reports (machines of this kind differ between sessions)."""
    return cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_has_avx2_fma() -> bool:
    return {"avx2", "fma", "f16c"} <= cpu_flags()


def avx512_build() -> bool:
    """Whether the kernels are built with AVX-512: on every CPU that has it, where the 16-lane decode GEMM
    beats the AVX2 build (also on AMD's Zen 4, which splits 512-bit ops in two; docs/performance.md)."""
    return {"avx512f", "avx512dq", "avx512bw", "avx512vl"} <= cpu_flags()


def avx512_int8() -> bool:
    """Whether the AVX-512 build has VNNI and VBMI (int4.h's int8-activation path)."""
    return avx512_build() and set(AVX512_INT8) <= cpu_flags()


def avx512_bf16() -> bool:
    """Whether the AVX-512 build has AVX512-BF16 (gemv.h's bf16 dot tile): the CPU and the compiler have it."""
    return avx512_build() and set(AVX512_BF16) <= cpu_flags() and _compiler_takes(tuple(AVX512_BF16.values()))


def amx_bf16() -> bool:
    """Whether the AVX-512 build has AMX's bf16 tiles (amx.h): the CPU has them and the compiler knows them
    (GCC 11, clang 12), so that an older compiler still builds every kernel, without amx.h."""
    return avx512_build() and set(AMX_BF16) <= cpu_flags() and _compiler_takes(tuple(AMX_BF16.values()))


@cache
def _compiler_takes(extra: tuple[str, ...]) -> bool:
    """Whether the system C compiler accepts these flags (compiling an empty unit)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return False
    try:
        done = subprocess.run(
            [cc, *extra, "-x", "c", "-c", "-o", os.devnull, "-"], input="", capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def flags() -> tuple[str, ...]:
    """The compiler flags for this CPU."""
    if not avx512_build():
        return FLAGS
    extra = (
        (AVX512_INT8 if avx512_int8() else {})
        | (AVX512_BF16 if avx512_bf16() else {})
        | (AMX_BF16 if amx_bf16() else {})
    )
    return FLAGS + AVX512 + tuple(extra.values())


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trtserve" / "kernels"


COMPILE_TIMEOUT_S = 600  # a loaded machine compiles decode_layers.c in minutes, an idle one in ~20 s


def _compile(cc: str, source: Path, so: Path) -> bool:
    """Compile `source` into `so` unless another process already did. Processes starting together (a
    server's workers, a test run) take a lock per library, so one compiles and the rest wait for it
    instead of each running the compiler on the same shared cores."""
    so.parent.mkdir(parents=True, exist_ok=True)
    with open(so.with_name(so.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if so.exists():  # compiled while this process waited
            return True
        tmp = so.with_name(f"{so.name}.{os.getpid()}.tmp")
        try:
            done = subprocess.run(
                [cc, *flags(), "-o", str(tmp), str(source)], capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            log.warning("kernel %s not compiled (%s); using torch's op", source.name, e)
            tmp.unlink(missing_ok=True)
            return False
        if done.returncode != 0:
            log.warning("kernel %s not compiled (%s); using torch's op", source.name, done.stderr.strip()[-500:])
            tmp.unlink(missing_ok=True)
            return False
        os.replace(tmp, so)  # atomic: a process that does not lock sees the whole library or none
        return True


@cache
def library(source: Path) -> ctypes.CDLL | None:
    """The compiled `source`, or None where this machine cannot build or run it."""
    if not cpu_has_avx2_fma():
        return None
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        log.warning("no C compiler found; %s is not used", source.name)
        return None
    headers = b"".join(h.read_bytes() for h in sorted(source.parent.glob("*.h")))  # what it may #include
    tag = hashlib.sha256(source.read_bytes() + headers + " ".join((cc, *flags())).encode()).hexdigest()[:16]
    so = cache_dir() / f"{source.stem}-{tag}.so"
    if not so.exists() and not _compile(cc, source, so):
        return None
    return ctypes.CDLL(str(so))


def function(source: Path, name: str, argtypes: str):
    """C function `name` of the compiled `source`, returning int, its arguments by letter: p a
    pointer, i an int, l an int64, f a float; None where this machine cannot build or run it."""
    lib = library(source)
    if lib is None:
        return None
    fn = getattr(lib, name)
    fn.argtypes = [
        {"p": ctypes.c_void_p, "i": ctypes.c_int, "l": ctypes.c_int64, "f": ctypes.c_float}[c] for c in argtypes
    ]
    fn.restype = ctypes.c_int
    return fn


def main(argv: list[str]) -> int:
    """The ISA caps below this CPU's level, one a line, lowest first (what scripts/isa_lanes.sh runs);
    with the argument `env`: the environment TRTSERVE_ISA's cap needs for torch, as KEY=VALUE lines."""
    if argv[1:] == ["env"]:
        print("\n".join(f"{k}={v}" for k, v in export_torch_env().items()))
        return 0
    if argv[1:]:
        print("usage: native.main([prog]) or native.main([prog, 'env'])", file=sys.stderr)
        return 2
    print("\n".join(isa.LEVELS[: isa.LEVELS.index(isa.native_level(hardware_flags()))]))
    return 0
