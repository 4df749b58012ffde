"""llama.cpp's own batched server (`llama-server`, continuous batching over several slots).

Nothing of llama.cpp is committed: `ensure_server` downloads the llama-cpp-python sdist with pip into
the cache dir and builds only the `llama-server` target of its vendored llama.cpp with cmake: for this CPU, or
under a TRTSERVE_ISA cap for the CPU kind the cap stands for (`ISA_BUILDS`), so that one machine compares each
kernel path against llama.cpp built as that CPU would build it.
`convert` turns an HF dir into GGUF at the asked precision with the vendored convert_hf_to_gguf.py, and
for llama.cpp's other quantized types (q4_0, q4_k_m, ...) quantizes its f32 GGUF with `llama-quantize`.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from peers.server import drive, free_port, last_error, running, warm_up

SDIST = "llama-cpp-python==0.3.36"
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # it would fetch the web UI from the network
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
]
_X86 = ("-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON")
# TRTSERVE_ISA cap (none: this CPU) -> llama.cpp's build as GGML_NATIVE builds it on the CPU kind the cap stands for
ISA_BUILDS = {
    None: ("llama-build", ("-DGGML_NATIVE=ON",)),
    "amx": ("llama-build", ("-DGGML_NATIVE=ON",)),
    "avx512": (  # AMD EPYC Zen 4
        "llama-build-avx512",
        (*_X86, "-DGGML_AVX512=ON", "-DGGML_AVX512_VBMI=ON", "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX512_BF16=ON"),
    ),
    "avx2": ("llama-build-avx2", _X86),  # AMD EPYC Zen 2/3
    "scalar": (
        "llama-build-scalar",
        (
            "-DGGML_NATIVE=OFF",
            "-DGGML_AVX=OFF",
            "-DGGML_AVX2=OFF",
            "-DGGML_FMA=OFF",
            "-DGGML_F16C=OFF",
            "-DGGML_BMI2=OFF",
        ),
    ),
}
GGUF_TYPES = ("f32", "f16", "bf16", "q8_0")  # convert_hf_to_gguf.py --outtype values we use
TARGETS = ("llama-server", "llama-quantize")
# what the converter says of a tokenizer it cannot take: a pre-tokenizer it does not know, no SentencePiece model
UNKNOWN_TOKENIZER = ("pre-tokenizer was not recognized", "tokenizer.model")


def source_dir(cache: Path) -> Path | None:
    found = sorted(cache.glob("llama_cpp_python-*/vendor/llama.cpp"))
    return found[-1] if found else None


def isa_build() -> tuple[str, tuple[str, ...]]:
    """The build dir's name and cmake flags for the TRTSERVE_ISA cap in effect (ISA_BUILDS)."""
    from trtserve.kernels import native  # no torch

    return ISA_BUILDS[native.isa_cap()]


def build_dir(cache: Path) -> Path:
    return cache / isa_build()[0]


def server_binary(cache: Path) -> Path:
    return build_dir(cache) / "bin" / "llama-server"


def quantize_binary(cache: Path) -> Path:
    return build_dir(cache) / "bin" / "llama-quantize"


def _built(cache: Path) -> bool:
    return server_binary(cache).exists() and quantize_binary(cache).exists()


def _run(cmd: list[str], log: Path, what: str = "", **kw) -> None:
    """Run `cmd` with its output appended to `log`; on failure raise what failed (`what`, else the program)
    and the log's error lines (`last_error`)."""
    start = log.stat().st_size if log.exists() else 0
    with open(log, "ab") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, **kw).returncode
    if rc != 0:
        why = last_error(log, start)
        raise RuntimeError(f"{what or Path(cmd[0]).name} failed (exit {rc}){why}; see {log}")


def ensure_server(cache: Path, build: bool, log: Path, jobs: int = 2) -> Path | None:
    """The llama-server binary, built from the sdist (with llama-quantize) when either is missing and `build`
    is set; None if unavailable."""
    binary = server_binary(cache)
    if _built(cache) or not build:
        return binary if binary.exists() else None  # without llama-quantize only q4_0 and such are missing
    cache.mkdir(parents=True, exist_ok=True)
    with open(build_dir(cache).with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another comparison building into the same cache: wait for it
        return binary if _built(cache) else _build(cache, log, jobs)


def _build(cache: Path, log: Path, jobs: int) -> Path | None:
    binary = server_binary(cache)
    if source_dir(cache) is None:
        sdists = cache / "sdist"
        pip = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", SDIST, "-d", str(sdists)]
        _run(pip, log)
        with tarfile.open(next(sdists.glob("llama_cpp_python-*.tar.gz"))) as tar:
            tar.extractall(cache, filter="data")
    src = source_dir(cache)
    _run(["cmake", "-S", str(src), "-B", str(build_dir(cache)), *CMAKE_FLAGS, *isa_build()[1]], log)
    _run(["cmake", "--build", str(build_dir(cache)), "--target", *TARGETS, "-j", str(jobs)], log)
    return binary if binary.exists() else None


def convert(cache: Path, hf_dir: Path, outtype: str, out: Path, log: Path) -> Path:
    """HF dir -> GGUF at `outtype`, once: f32, f16, bf16 and q8_0 with the vendored converter, any other
    type llama-quantize knows (q4_0, q4_k_m, ...) by quantizing the f32 GGUF."""
    if out.exists():
        return out
    if outtype not in GGUF_TYPES:
        f32 = convert(cache, hf_dir, "f32", out.with_name(out.name.replace(f"-{outtype}.", "-f32.")), log)
        if not quantize_binary(cache).exists():
            raise RuntimeError(f"{outtype} needs llama-quantize, which is not built in {cache}")
        tmp = out.with_suffix(".partial")
        _run([str(quantize_binary(cache)), str(f32), str(tmp), outtype.upper()], log)
        shutil.move(tmp, out)
        return out
    src = source_dir(cache)
    if src is None:
        raise RuntimeError("no llama.cpp source in the cache dir; run with --build-llama first")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial")
    env = {**os.environ, "PYTHONPATH": str(src / "gguf-py")}  # the converter's own gguf, not the installed one
    script = src / "convert_hf_to_gguf.py"
    argv = [str(script), str(hf_dir), "--outtype", outtype, "--outfile", str(tmp)]
    start = log.stat().st_size if log.exists() else 0
    try:
        _run([sys.executable, *argv], log, "convert_hf_to_gguf.py", env=env)
    except RuntimeError:
        said = log.read_bytes()[start:].decode(errors="replace")
        if not any(m in said for m in UNKNOWN_TOKENIZER):
            raise
        # A tokenizer the converter does not take (the random TinyLlama's and the shapes' byte-level BPE test
        # tokenizer, which has no SentencePiece tokenizer.model, where Gemma 2 and Phi-3 read one): record the
        # "default" pre-tokenizer and write the vocabulary as GPT-2-style BPE (padded to the config's vocab_size).
        # The benchmark sends token ids, so llama.cpp never tokenizes text and this changes nothing measured.
        # A neutral general.name too: llama-server keys tokenizer fix-ups on it (a name with "phi3" in it wants
        # Phi-3's special tokens, which the test tokenizer lacks, and the model fails to load).
        arch = json.loads((hf_dir / "config.json").read_text())["architectures"][0]
        patch = [
            "import runpy, sys",
            f"sys.path.insert(0, {str(src)!r})",
            f"sys.argv = {[*argv, '--model-name', 'random weights, test tokenizer']!r}",
            "from conversion.base import TextModel",
            "TextModel.get_vocab_base_pre = lambda self, tok: 'default'",
        ]
        if not (hf_dir / "tokenizer.model").exists():
            patch += [
                "from conversion import get_model_class",
                f"get_model_class({arch!r}).set_vocab = lambda self: self._set_vocab_gpt2()",
            ]
        patch.append(f"runpy.run_path({str(script)!r}, run_name='__main__')")
        _run([sys.executable, "-c", "; ".join(patch)], log, "convert_hf_to_gguf.py (its tokenizer patched)", env=env)
    shutil.move(tmp, out)
    return out


def serve_and_run(
    binary: Path, gguf: Path, runs: list[dict], *, threads: int, slots: int, ctx_per_slot: int, log: Path, seed: int
):
    """Start llama-server on `gguf` with `slots` parallel slots and do `runs` in order; {name: BenchRun}."""
    port = free_port()
    cmd = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["-t", str(threads), "-tb", str(threads), "-np", str(slots), "-c", str(slots * ctx_per_slot)]
    cmd += ["--cont-batching", "--no-webui"]
    url = f"http://127.0.0.1:{port}"
    out = {}
    with running(cmd, url + "/health", log):
        warm_up(url, "model")
        for r in runs:
            out[r["name"]] = drive(
                url,
                "model",
                r["requests"],
                max_concurrency=r["max_concurrency"],
                request_rate=r["request_rate"],
                seed=seed,
            )
    return out
