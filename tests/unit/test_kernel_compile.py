"""Kernels compile once per machine even when processes start together: one compiles under a lock per
library, the others wait and load its result; nothing half-written is left in the cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from trtserve.kernels import native

pytestmark = pytest.mark.skipif(
    not native.cpu_has_avx2_fma() or shutil.which("cc") is None, reason="needs AVX2/FMA and a C compiler"
)

LOAD = """
import sys
from pathlib import Path
from trtserve.kernels import native
fn = native.function(Path(sys.argv[1]), "answer", "")
sys.exit(0 if fn is not None and fn() == 42 else 1)
"""


def test_processes_starting_together_compile_once(tmp_path):
    src = tmp_path / "k" / "answer.c"
    src.parent.mkdir()
    src.write_text("int answer(void) { return 42; }\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"
    wrapper = bin_dir / "cc"  # logs each compiler run, then compiles slowly enough for the others to wait
    # logs each compile of this source (a probe of the compiler's flags, native._compiler_takes, is not one)
    wrapper.write_text(
        f'#!/bin/sh\ncase "$*" in *answer.c*) echo run >> {calls}; sleep 1;; esac\nexec {shutil.which("cc")} "$@"\n'
    )
    wrapper.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-c", LOAD, str(src)], env=env) for _ in range(4)]
    codes = [p.wait(timeout=300) for p in procs]
    assert codes == [0, 0, 0, 0]
    assert calls.read_text().splitlines() == ["run"]  # one compile for four processes
    built = sorted(p.name for p in (tmp_path / "cache" / "trtserve" / "kernels").iterdir())
    assert [n for n in built if n.endswith(".so")] and not [n for n in built if n.endswith(".tmp")]
