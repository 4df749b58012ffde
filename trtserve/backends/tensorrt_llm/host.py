"""`trtserve doctor`: what this host has for TensorRT-LLM, and which workflows it can build and run.

gather() reads the host (TensorRT-LLM's metadata, then `import tensorrt_llm` only when it is
installed, TensorRT, torch's CUDA, the driver through nvidia-smi, GPU 0 and its SM); verdicts() is a
pure function of that report, so every answer and reason is tested without a GPU.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import asdict, dataclass

from trtserve.backends.tensorrt_llm import capabilities, install
from trtserve.backends.tensorrt_llm.builder_rules import blackwell_problem
from trtserve.backends.tensorrt_llm.capabilities import Capabilities
from trtserve.backends.tensorrt_llm.compat import workflow_problem

MIN_SM = (8, 0)  # Ampere: the oldest architecture on TensorRT-LLM's supported-hardware page (1.x docs)
BLACKWELL_WORKFLOW = "build --backend tensorrt --quant w8a16|w4a16*|w8a8_sq|fp8_pcpt, --kv-cache-quant int8"
BLACKWELL_WHY = (
    "trtllm-build refuses INT8/INT4 weight-only (W4A8_AWQ included), SmoothQuant, per-token FP8 and the INT8 KV "
    "cache on SM>=100"
)


@dataclass
class HostReport:
    caps: Capabilities | None  # introspected when the import worked, else from metadata; None: not installed
    import_error: str | None  # why `import tensorrt_llm` failed, if it did
    tensorrt: str | None  # TensorRT version
    torch: str  # torch version
    cuda: str | None  # the CUDA torch was built with; None: CPU-only torch
    driver: str | None  # NVIDIA driver version from nvidia-smi
    gpu_name: str | None  # GPU 0
    sm: str | None  # its compute capability, "9.0"
    trtllm_build: str | None  # where trtllm-build is on PATH

    def to_dict(self) -> dict:
        out = asdict(self)
        out["caps"] = None if self.caps is None else {**asdict(self.caps), "label": self.caps.label}
        for key in ("torch_args", "trt_args"):
            if out["caps"] is not None:
                out["caps"][key] = sorted(out["caps"][key])
        return out


@dataclass(frozen=True)
class Verdict:
    workflow: str
    ok: bool
    why: str


def gather() -> HostReport:
    """Read this host. Imports tensorrt_llm only if its distribution is installed."""
    import torch

    caps, error, tllm = capabilities.installed(), None, None
    if caps is not None:
        try:
            import tensorrt_llm as tllm

            caps = capabilities.probe(tllm, serve_cli=True)
        except Exception as err:  # noqa: BLE001 - a broken install is what doctor is for
            error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".rstrip(": ")
    target = install.installed_target(tllm)
    return HostReport(
        caps=caps,
        import_error=error,
        tensorrt=target.tensorrt or install._dist_version("tensorrt"),
        torch=torch.__version__,
        cuda=target.cuda,
        driver=_driver_version(),
        gpu_name=target.gpu_name,
        sm=target.sm,
        trtllm_build=shutil.which("trtllm-build"),
    )


def _driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=15,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else None


def _gpu_problem(r: HostReport) -> str | None:
    if r.sm is None:
        cpu = "torch was built without CUDA" if r.cuda is None else "torch.cuda.is_available() is False"
        return f"no CUDA GPU is visible ({cpu})"
    major, minor = (int(x) for x in r.sm.split("."))
    if (major, minor) < MIN_SM:
        return f"GPU 0 ({r.gpu_name}) is SM {r.sm}, older than Ampere (SM 8.0), the oldest TensorRT-LLM supports"
    return None


def _trtllm_problem(r: HostReport, backend: str, *, build: bool) -> str | None:
    """Why TensorRT-LLM on this host cannot build/run `backend`, GPU aside."""
    if r.caps is None:
        return f"TensorRT-LLM is not installed; install it with `{install.INSTALL_COMMAND}`"
    if r.import_error:
        return f"TensorRT-LLM {r.caps.version} is installed but `import tensorrt_llm` failed ({r.import_error})"
    problem = workflow_problem(r.caps, backend, build=build)
    if problem is None and build and backend == "tensorrt" and r.trtllm_build is None:
        return "trtllm-build is not on PATH although tensorrt_llm imports; reinstall TensorRT-LLM"
    return problem


def verdicts(r: HostReport) -> list[Verdict]:
    """Which workflows this host can build and run, and why not where it cannot."""
    gpu = _gpu_problem(r)
    planned = r.caps if r.caps is not None else capabilities.for_planning(None)
    torch_where = "CPU" if gpu else f"CPU or {r.gpu_name}"
    out = [
        Verdict("build --backend torch, run torch engine dirs", True, f"the embedded engine ({torch_where})"),
        Verdict(
            "build --backend trtllm",
            True,
            f"needs no TensorRT-LLM; writes llm_api_options.yaml for {planned.label}",
        ),
    ]
    for name, backend, build in (
        ("run --backend trtllm engine dirs", "trtllm", False),
        ("build --backend tensorrt", "tensorrt", True),
        ("run --backend tensorrt engine dirs", "tensorrt", False),
    ):
        why = _trtllm_problem(r, backend, build=build) or gpu
        if why is None:
            fits = " built on this host (same TensorRT-LLM, TensorRT and SM)" if backend == "tensorrt" else ""
            why = f"{r.caps.label}, {r.gpu_name} (SM {r.sm}){fits}"
            out.append(Verdict(name, True, why))
        else:
            out.append(Verdict(name, False, why))
    if out[-2].ok and blackwell_problem("W8A16", None, r.sm) is not None:  # it builds, but not every format
        out.append(Verdict(BLACKWELL_WORKFLOW, False, f"GPU 0 ({r.gpu_name}) is SM {r.sm}: {BLACKWELL_WHY}"))
    lines = ", ".join(capabilities.RELEASES)
    out.append(Verdict("build --dry-run (tensorrt, trtllm)", True, f"any release: --trtllm-version {lines}"))
    return out


def render(r: HostReport, vs: list[Verdict]) -> str:
    """The doctor's report as text: the host, then one line a workflow."""

    def have(value, missing: str) -> str:
        return value if value else missing

    trtllm = "not installed" if r.caps is None else r.caps.label
    if r.import_error:
        trtllm += f"; import failed: {r.import_error}"
    rows = [
        ("TensorRT-LLM", trtllm),
        ("TensorRT", have(r.tensorrt, "not installed")),
        ("CUDA (torch)", have(r.cuda, f"none (CPU-only torch {r.torch})")),
        ("NVIDIA driver", have(r.driver, "none (nvidia-smi not found or failed)")),
        ("GPU", f"{r.gpu_name}, SM {r.sm}" if r.sm else "none visible"),
        ("trtllm-build", have(r.trtllm_build, "not on PATH")),
    ]
    lines = ["host:"] + [f"  {k:<14} {v}" for k, v in rows] + ["workflows:"]
    lines += [f"  {'yes' if v.ok else 'no ':<4} {v.workflow:<45} {v.why}" for v in vs]
    return "\n".join([*lines, summary(r, vs)])


def summary(r: HostReport, vs: list[Verdict]) -> str:
    """One sentence on what this host is good for."""
    if r.caps is None:
        return (
            "summary: TensorRT-LLM is not installed here, so nothing runs on TensorRT-LLM; trtserve builds and "
            "serves torch engines, writes --backend trtllm engine dirs and plans TensorRT-LLM builds (--dry-run)."
        )
    can = [v.workflow for v in vs[2:-1] if v.ok]
    if not can:
        return "summary: TensorRT-LLM is installed but no TensorRT-LLM workflow can run here (reasons above)."
    return "summary: this host can " + "; ".join(can) + "."
