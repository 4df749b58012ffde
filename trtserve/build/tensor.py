"""`trtserve build model.onnx -o ENGINE_DIR`: an ONNX graph -> a tensor-model engine dir.

    ENGINE_DIR/manifest.json   backend "onnxruntime", source {"kind": "onnx", path, fingerprint}
    ENGINE_DIR/config.pbtxt    Triton's ModelConfig derived from the graph (no `name`: the dir names it)
    ENGINE_DIR/model.onnx      the graph, checked by onnx.checker and loaded by ONNX Runtime

`--backend tensorrt` writes model.plan from trtexec instead (platform "tensorrt_plan"), or with
--dry-run prints the trtexec command. Written atomically (build/output.py): nothing is left on failure.
"""

from __future__ import annotations

import platform
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console

from trtserve.build.output import check_target, staged_dir
from trtserve.engine.errors import UserError
from trtserve.engine.hashing import fingerprint
from trtserve.engine.manifest import Manifest, write_manifest
from trtserve.tensor.config import CONFIG_FILE, parse_config, read_config
from trtserve.tensor.onnx_graph import GraphIO, config_text, graph_io, load_graph, model_config
from trtserve.tensor.types import DATATYPES

ONNX_FILE, PLAN_FILE, EXTERNAL_DATA = "model.onnx", "model.plan", "model.onnx.data"
# --backend for a .onnx MODEL -> (manifest backend, config.pbtxt platform; "" = backend "onnxruntime")
TENSOR_BACKENDS = {"onnxruntime": ("onnxruntime", ""), "tensorrt": ("tensorrt_plan", "tensorrt_plan")}


def is_onnx_source(model: str | None) -> bool:
    return bool(model) and str(model).lower().endswith(".onnx")


@dataclass(frozen=True)
class TensorBuild:
    """What one ONNX build makes, resolved before anything is written."""

    source: Path  # the .onnx file
    backend: str  # a TENSOR_BACKENDS key
    io: GraphIO
    config_pbtxt: str  # the config.pbtxt text
    max_batch_size: int  # 0: the graph has no batch dim

    def trtexec_argv(self, out: Path) -> list[str]:
        """trtexec building model.plan with one optimization profile: batch 1 .. max_batch_size."""
        argv = ["trtexec", f"--onnx={self.source}", f"--saveEngine={out / PLAN_FILE}"]
        if self.max_batch_size:
            most = self.max_batch_size
            for flag, batch in (("minShapes", 1), ("optShapes", max(1, most // 2)), ("maxShapes", most)):
                argv.append(f"--{flag}=" + ",".join(_shape_arg(t.name, (batch, *t.shape[1:])) for t in self.io.inputs))
        return argv


def _shape_arg(name: str, shape: tuple) -> str:
    quoted = f"'{name}'" if ":" in name else name  # trtexec's quoting for names holding ':'
    return f"{quoted}:" + "x".join(str(d) for d in shape)


def plan(source: str | Path, backend: str, max_batch_size: int | None) -> TensorBuild:
    """Read and check the graph and derive its config; writes nothing."""
    src = Path(source).expanduser()
    if not src.is_file():
        raise UserError(f"MODEL {src} does not exist; give the path of a .onnx file")
    src = src.resolve()
    model = load_graph(src)
    check_graph(src)
    io = graph_io(model)
    msg = model_config(io, "", max_batch_size, TENSOR_BACKENDS[backend][1])
    if backend == "tensorrt":
        for t in io.inputs:
            if None in t.shape[1 if msg.max_batch_size else 0 :]:
                raise UserError(
                    f"ONNX input {t.name!r} has shape {_shape_text(t.shape)} with a dynamic dim besides the batch "
                    "dim, which a trtexec profile needs a range for; export it with fixed sizes there"
                )
    text = config_text(msg, src.name)
    if backend == "onnxruntime":
        parse_config(text, "model", src.parent)  # what serving will read must read back
    return TensorBuild(src, backend, io, text, msg.max_batch_size)


def _shape_text(shape: tuple) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def dry_run(build: TensorBuild, out: Path) -> str:
    """The plan as text: the engine dir, its config.pbtxt and the equivalent commands."""
    lines = [
        f"plan: {build.backend} engine dir {out} for ONNX model {build.source}",
        f"  max_batch_size {build.max_batch_size}; inputs "
        + ", ".join(f"{t.name} {_shape_text(t.shape)}" for t in build.io.inputs),
        f"{CONFIG_FILE}:",
        build.config_pbtxt.rstrip(),
    ]
    if build.backend == "tensorrt":
        lines += [
            "equivalent commands:",
            "  " + shlex.join(build.trtexec_argv(out)),
            "alternative: serve model.onnx with ONNX Runtime's TensorRT execution provider (onnxruntime-gpu), "
            "providers=['TensorrtExecutionProvider'] with trt_profile_min_shapes / trt_profile_opt_shapes / "
            "trt_profile_max_shapes set to the --minShapes / --optShapes / --maxShapes values above",
        ]
    return "\n".join(lines)


def build_tensor_engine(build: TensorBuild, out: Path, *, force: bool = False, quiet: bool = False) -> Manifest:
    """Write the engine dir `out` for `build` (atomically); UserError leaves nothing behind."""
    console = Console(stderr=True, quiet=quiet)
    check_target(out, force)
    if build.backend == "tensorrt" and shutil.which("trtexec") is None:
        raise UserError(
            "--backend tensorrt runs trtexec, which is not on PATH: TensorRT is not installed here; add --dry-run to "
            "print the plan, or build on a machine with TensorRT"
        )
    console.print(f"[bold]Building[/] {build.source.name} for {build.backend}, max_batch_size {build.max_batch_size}")
    with staged_dir(out, force) as tmp:
        (tmp / CONFIG_FILE).write_text(build.config_pbtxt)
        if build.backend == "onnxruntime":
            _copy_graph(build.source, tmp / ONNX_FILE)
            trial_run(tmp / ONNX_FILE, build)
        else:
            _run_trtexec(build, tmp)
        manifest = write_manifest(
            tmp,
            backend=TENSOR_BACKENDS[build.backend][0],
            target_device="cpu" if build.backend == "onnxruntime" else "cuda",
            source={"kind": "onnx", "path": str(build.source), "fingerprint": fingerprint({ONNX_FILE: build.source})},
            toolchain=toolchain_versions(),
            build_config={"backend": build.backend, "max_batch_size": build.max_batch_size},
        )
    console.print(f"[green]Engine written to[/] {out}")
    return manifest


def check_graph(src: Path) -> None:
    """onnx.checker over the file (by path, so external weights and >2 GiB models are checked too)."""
    import onnx

    try:
        onnx.checker.check_model(str(src), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{src} is not a valid ONNX model ({first}); fix the export") from None


def _copy_graph(src: Path, dest: Path) -> None:
    """model.onnx in the engine dir; a graph whose weights live in external files gets them as one
    model.onnx.data beside it, so the engine dir stands alone."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    model = load_graph(src)
    if not any(uses_external_data(t) for t in model.graph.initializer):
        shutil.copyfile(src, dest)
        return
    model = onnx.load(str(src))
    onnx.save_model(model, str(dest), save_as_external_data=True, location=EXTERNAL_DATA)


def trial_run(onnx_file: Path, build: TensorBuild) -> None:
    """Load the copied graph in ONNX Runtime (and, when every input is a float tensor of fixed dims,
    run a batch of zeros and check the output shapes against config.pbtxt), so a model that cannot
    be served fails the build. Integer inputs are left untried: zero may not be a valid index or count."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4  # the error is reported below, once
    try:
        session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001 - onnxruntime raises its own pybind error types
        raise UserError(f"ONNX Runtime cannot load {build.source} ({_first_line(err)}); fix the export") from None
    batch = (1,) if build.max_batch_size else ()
    skip = len(batch)
    if any(None in t.shape[skip:] or t.data_type not in _FLOATS for t in build.io.inputs):
        return
    feeds = {t.name: _zeros(batch + t.shape[skip:], t.data_type) for t in build.io.inputs}
    try:
        results = session.run([t.name for t in build.io.outputs], feeds)
    except Exception as err:  # noqa: BLE001
        raise UserError(
            f"ONNX Runtime fails to run {build.source} on zeros ({_first_line(err)}); fix the export"
        ) from None
    for t, value in zip(build.io.outputs, results, strict=True):
        want = batch + t.shape[skip:]
        if len(value.shape) != len(want) or any(
            w is not None and w != v for w, v in zip(want, value.shape, strict=True)
        ):
            raise UserError(
                f"ONNX output {t.name!r} comes out as {list(value.shape)} but the graph declares "
                f"{_shape_text(want)}; fix the output's shape in the export"
            )


_FLOATS = ("TYPE_FP16", "TYPE_FP32", "TYPE_FP64")


def _zeros(shape: tuple, data_type: str) -> np.ndarray:
    return np.zeros(shape, dtype=next(np_type for np_type, name in DATATYPES.values() if name == data_type))


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _run_trtexec(build: TensorBuild, tmp: Path) -> None:
    argv = build.trtexec_argv(tmp)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (tmp / PLAN_FILE).is_file():
        tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise UserError(f"trtexec failed (exit {done.returncode}: {tail}); run `{shlex.join(argv)}` to see why")


def toolchain_versions() -> dict[str, str]:
    from importlib.metadata import version

    import trtserve

    return {
        "trtserve": trtserve.__version__,
        "onnx": version("onnx"),
        "onnxruntime": version("onnxruntime"),
        "python": platform.python_version(),
    }


def summarize(engine_dir: Path, manifest: Manifest) -> dict:
    """`trtserve inspect` of a tensor engine dir: how it was built and the model its config.pbtxt describes."""
    cfg = read_config(engine_dir, engine_dir.resolve().name)
    batching = cfg.dynamic_batching
    return {
        "engine_dir": str(engine_dir),
        "backend": manifest.backend,
        "created_at": manifest.created_at,
        "source": manifest.source,
        "toolchain": manifest.toolchain,
        "platform": cfg.platform,
        "max_batch_size": cfg.max_batch_size,
        "inputs": {t.name: f"{t.datatype}{list(t.dims)}" for t in cfg.inputs},
        "outputs": {t.name: f"{t.datatype}{list(t.dims)}" for t in cfg.outputs},
        "dynamic_batching": "off" if batching is None else f"on, max_queue_delay_us={batching.max_queue_delay_us}",
        "instance_count": cfg.instance_count,
        "weight_bytes": sum(e.size for rel, e in manifest.files.items() if rel.startswith("model.")),
    }
