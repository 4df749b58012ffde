"""The kernel ISA cap (TRTSERVE_ISA, trtserve/kernels/isa.py): the flags and vendor each cap leaves the
kernels, a cap above the CPU clamped, a bad value refused, torch held to the cap where a lane runs under
one (scripts/isa_lanes.sh); and the dense GEMM's sums of a row the same whatever the rows, in each build
(what lets verification rows equal plain decode rows on every path)."""

from __future__ import annotations

import ctypes
import logging
import shutil
from pathlib import Path

import pytest
import torch

from trtserve.kernels import dense, isa, native

# Flags of the three CPUs the project ships on (the part the kernels look at)
ZEN3 = frozenset({"avx", "avx2", "fma", "f16c", "sse4_2"})
ZEN4 = ZEN3 | {"avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vnni", "avx512vbmi", "avx512_bf16"}
SPR = ZEN4 | {"avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8"}


def test_each_cap_leaves_the_flags_of_its_cpu():
    assert [isa.native_level(f) for f in (frozenset({"sse4_2"}), ZEN3, ZEN4, SPR)] == list(isa.LEVELS)
    assert isa.capped(SPR, "amx") == SPR and isa.capped(SPR, None) == SPR
    assert isa.capped(SPR, "avx512") == ZEN4
    assert isa.capped(SPR, "avx2") == ZEN3 == isa.capped(ZEN4, "avx2")
    assert isa.capped(SPR, "scalar") == {"sse4_2"}


def test_the_cap_reaches_native_and_clamps_above_the_cpu(monkeypatch, caplog):
    for fn in (native.isa_cap, native.cpu_flags):
        monkeypatch.setattr(native, fn.__name__, fn.__wrapped__)  # uncached, to read each setting
    monkeypatch.setattr(native, "hardware_flags", lambda: ZEN4)
    monkeypatch.setattr(native, "cpuinfo", lambda key: "GenuineIntel" if key == "vendor_id" else "")
    monkeypatch.delenv(isa.VAR, raising=False)
    assert native.isa_cap() is None and native.cpu_flags() == ZEN4 and native.cpu_vendor() == "GenuineIntel"
    monkeypatch.setenv(isa.VAR, "avx2")
    assert native.cpu_flags() == ZEN3 and not native.avx512_build() and native.cpu_has_avx2_fma()
    assert native.cpu_vendor() == "AuthenticAMD"  # the caps below AMX dispatch as on AMD EPYC
    monkeypatch.setenv(isa.VAR, "avx512")
    assert native.avx512_build() and not native.amx_bf16()  # Zen 4 takes the AVX-512 build
    monkeypatch.setenv(isa.VAR, "scalar")
    assert not native.cpu_has_avx2_fma()  # no C kernels: torch's ops
    monkeypatch.setenv(isa.VAR, "amx")
    with caplog.at_level(logging.WARNING):
        assert native.isa_cap() == "avx512"
    assert "above this CPU's level" in caplog.text
    monkeypatch.setenv(isa.VAR, "avx3")
    with pytest.raises(ValueError, match="not a kernel ISA cap; use one of scalar, avx2, avx512, amx"):
        native.isa_cap()


def test_amx_and_bf16_dots_join_the_avx512_build_where_cpu_and_compiler_have_them(monkeypatch):
    takes = native._compiler_takes.__wrapped__  # uncached
    monkeypatch.setattr(native, "cpu_vendor", lambda: "GenuineIntel")
    for flags, compiler, amx in ((SPR, True, True), (SPR, False, False), (ZEN4, True, False), (ZEN4, False, False)):
        monkeypatch.setattr(native, "cpu_flags", lambda flags=flags: flags)
        monkeypatch.setattr(native, "_compiler_takes", lambda extra, ok=compiler: ok)
        assert native.amx_bf16() == amx and native.avx512_bf16() == compiler
        assert ("-mamx-bf16" in native.flags()) == amx and "-mavx512f" in native.flags()
        assert ("-mavx512bf16" in native.flags()) == compiler  # gemv.h's bf16 dot tile
    if shutil.which("cc") or shutil.which("gcc"):
        assert not takes(("-mno-such-flag",)) and takes(("-O2",))  # an older compiler: no amx.h, still a build


def test_torch_runs_at_the_cap_in_force():
    """In a lane under a cap, torch's vectorised ops keep to it too (its env set before its first op)."""
    want = {"scalar": "DEFAULT", "avx2": "AVX2", "avx512": "AVX512"}.get(native.isa_cap())
    if want is None:
        pytest.skip("no ISA cap below this CPU's level in force")
    assert torch.backends.cpu.get_cpu_capability() == want


def _build(tmp_path: Path, monkeypatch, wide: bool):
    monkeypatch.setattr(native, "avx512_build", lambda: wide)
    so = tmp_path / f"dense-{int(wide)}.so"
    assert native._compile(shutil.which("cc"), dense.SOURCE, so)
    fn = ctypes.CDLL(str(so)).trtserve_dense_gemm
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int]
    fn.argtypes += [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    return fn


@pytest.mark.skipif(
    not native.cpu_has_avx2_fma() or not shutil.which("cc"), reason="needs x86-64 with AVX2/FMA/F16C and cc"
)
@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_rows_sums_do_not_depend_on_the_rows_beside_it(tmp_path, monkeypatch, wide, dtype):
    """Each build gives a row of x the same bits at 1 row as among 2-64 (every tile height sums a row in
    one order), K past its chunks and not a multiple of 8 or 16."""
    if wide and not {"avx512f", "avx512dq", "avx512bw", "avx512vl"} <= native.hardware_flags():
        pytest.skip("the AVX-512 build needs a CPU with AVX-512")
    fn = _build(tmp_path, monkeypatch, wide)
    g = torch.Generator().manual_seed(5)
    k, n = 1100, 37
    x = torch.randn(dense.MAX_ROWS, k, generator=g).to(dtype)
    w = torch.randn(n, k, generator=g).to(dtype)

    def gemm(first: int, rows: int) -> torch.Tensor:  # rows first.. of x @ w^T, in one call
        y = torch.empty(rows, n, dtype=dtype)
        code = dense.DTYPES[dtype]
        assert fn(x[first:].data_ptr(), code, rows, k, w.data_ptr(), code, n, None, y.data_ptr(), 2) == 0
        return y

    alone = torch.cat([gemm(i, 1) for i in range(3)])  # rows 0-2, one a call
    for rows in (2, 3, 4, 5, 8, 13, dense.MAX_ROWS):
        assert torch.equal(gemm(0, rows)[:3], alone[:rows]), rows
