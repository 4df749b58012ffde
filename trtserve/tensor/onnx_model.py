"""ONNX models (Triton's onnxruntime backend): `instance_count` ONNX Runtime sessions, each an
Executor behind BatchedModel, with the CPUs this process may use split between them."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from trtserve.engine.errors import UserError
from trtserve.tensor.batched import BatchedModel
from trtserve.tensor.types import (
    InvalidInput,
    ModelExecutionError,
    Resolver,
    TensorError,
    TensorModelConfig,
    TensorSpec,
)
from trtserve.tensor.validate import dims_str

# ONNX Runtime's type strings -> KServe datatypes.
ORT_TYPES = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}


class OnnxExecutor:
    """One session. A batch's inputs are concatenated along the batch dim, run once, and the outputs
    split back by each request's rows; a model that does not batch runs one request at a time."""

    def __init__(self, session, config: TensorModelConfig):
        self.session = session
        self.batched = config.max_batch_size > 0
        self.names = [o.name for o in session.get_outputs()]
        # ONNX Runtime's string tensors take and give Python str: BYTES cross as UTF-8 text
        self.text_in = {i.name for i in session.get_inputs() if i.type == "tensor(string)"}
        self.text_out = {o.name for o in session.get_outputs() if o.type == "tensor(string)"}

    def execute(self, batch: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray] | TensorError]:
        results: list[dict[str, np.ndarray] | TensorError] = []
        feeds = []
        for r in batch:
            try:
                feeds.append({n: _text(n, a) if n in self.text_in else a for n, a in r.items()})
                results.append({})
            except TensorError as e:  # this request alone fails
                results.append(e)
        ok = [i for i, r in enumerate(results) if not isinstance(r, TensorError)]
        if len(ok) == 1 or (ok and not self.batched):
            outs = [self._run(f) for f in feeds]
        elif ok:
            outs = self._run_batched(feeds)
        else:
            outs = []
        for i, out in zip(ok, outs, strict=True):
            results[i] = out
        return results

    def _run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outs = self.session.run(self.names, feed)
        return {n: _bytes(o) if n in self.text_out else o for n, o in zip(self.names, outs, strict=True)}

    def _run_batched(self, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        feed = {name: np.concatenate([f[name] for f in feeds]) for name in feeds[0]}  # (sum of rows, ...)
        out = self._run(feed)
        ends = np.cumsum([len(next(iter(f.values()))) for f in feeds])
        for name, o in out.items():
            if o.ndim == 0 or len(o) != ends[-1]:
                raise ModelExecutionError(
                    f"output '{name}' has shape {list(o.shape)} for a batch of {ends[-1]}: its first dim is not "
                    "the batch dim, so the model cannot batch (set max_batch_size 0)"
                )
        per_output = [np.split(o, ends[:-1]) for o in out.values()]  # views: one slice per request
        return [dict(zip(out, parts, strict=True)) for parts in zip(*per_output, strict=True)]

    def close(self) -> None:
        self.session = None


def _text(name: str, array: np.ndarray) -> np.ndarray:
    """A BYTES input as the str elements ONNX Runtime's string tensors take."""
    try:
        flat = [v.decode() if isinstance(v, bytes) else str(v) for v in array.ravel()]
    except UnicodeDecodeError:
        raise InvalidInput(
            f"input '{name}' holds bytes that are not UTF-8 text; ONNX string tensors carry text"
        ) from None
    return np.array(flat, dtype=np.object_).reshape(array.shape)


def _bytes(array: np.ndarray) -> np.ndarray:
    """A string output as BYTES: UTF-8 bytes elements."""
    flat = [v.encode() if isinstance(v, str) else v for v in array.ravel()]
    return np.array(flat, dtype=np.object_).reshape(array.shape)


def thread_counts(config: TensorModelConfig) -> tuple[int, int]:
    """(intra-op, inter-op) threads per session: the CPUs this process may use split between the
    instances, unless ModelConfig.parameters set `intra_op_thread_count` / `inter_op_thread_count`
    (the onnxruntime backend's parameters; 0 leaves ONNX Runtime's own default)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    intra = max(1, cpus // max(1, config.instance_count))
    inter = 1
    for key in ("intra_op_thread_count", "inter_op_thread_count"):
        value = config.parameters.get(key)
        if value is None:
            continue
        try:
            n = int(value)
        except ValueError:
            raise UserError(
                f"model '{config.name}': parameter {key} is {value!r}; give a whole number of threads"
            ) from None
        if n < 0:
            raise UserError(f"model '{config.name}': parameter {key} is {n}; give 0 (ONNX Runtime's default) or more")
        if key == "intra_op_thread_count":
            intra = n
        else:
            inter = n
    return intra, inter


# ONNX Runtime's pool threads spin after each run by default, burning the CPUs the event loop and the
# other instances need between batches; ModelConfig.parameters "session.*" entries override these.
SESSION_ENTRIES = {"session.intra_op.allow_spinning": "0", "session.inter_op.allow_spinning": "0"}


def session_entries(config: TensorModelConfig) -> dict[str, str]:
    """ONNX Runtime session config entries: ours, then every ModelConfig.parameters key "session.*"."""
    return SESSION_ENTRIES | {k: v for k, v in config.parameters.items() if k.startswith("session.")}


def _session(path: Path, config: TensorModelConfig, intra: int, inter: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = intra
    opts.inter_op_num_threads = inter
    for key, value in session_entries(config).items():
        opts.add_session_config_entry(key, value)
    try:
        return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types for a bad graph
        raise UserError(f"model '{config.name}': ONNX Runtime cannot load {path}: {e}") from None


def _check(config: TensorModelConfig, what: str, specs: tuple[TensorSpec, ...], args, path: Path) -> None:
    """The config's inputs (or outputs) against the graph's: names, datatypes, ranks and fixed dims."""
    graph = {a.name: a for a in args}
    for spec in specs:
        arg = graph.get(spec.name)
        if arg is None:
            raise UserError(
                f"model '{config.name}': config.pbtxt names {what} '{spec.name}' but {path.name} has "
                f"{what}s {', '.join(repr(n) for n in graph)}; make the names agree"
            )
        dtype = ORT_TYPES.get(arg.type, arg.type)
        if dtype != spec.datatype:
            raise UserError(
                f"model '{config.name}': {what} '{spec.name}' is {spec.datatype} in config.pbtxt but {dtype} "
                f"in {path.name}; make the data_type agree"
            )
        dims = ((-1,) if config.max_batch_size > 0 else ()) + tuple(spec.dims)
        shape = [d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape]
        if len(shape) != len(dims) or any(a != -1 and b != -1 and a != b for a, b in zip(dims, shape, strict=True)):
            batch = " (max_batch_size > 0 adds the leading batch dim)" if config.max_batch_size > 0 else ""
            raise UserError(
                f"model '{config.name}': {what} '{spec.name}' has dims {dims_str(dims)}{batch} in config.pbtxt "
                f"but shape {dims_str(shape)} in {path.name}; make the dims agree"
            )
    if what == "input":
        required = set(graph) - {t.name for t in specs}
        if required:
            raise UserError(
                f"model '{config.name}': {path.name} needs input(s) {', '.join(repr(n) for n in sorted(required))} "
                "that config.pbtxt does not declare; add them to its input list"
            )


def open_onnx(config: TensorModelConfig, version_dir: Path, resolve: Resolver) -> BatchedModel:
    """Load `instance_count` sessions of version_dir/model.onnx (or default_model_filename)."""
    path = Path(version_dir) / (config.default_model_filename or "model.onnx")
    if not path.is_file():
        raise UserError(
            f"model '{config.name}': {path} does not exist; a version dir of an onnxruntime model holds "
            "model.onnx (or the file default_model_filename names)"
        )
    intra, inter = thread_counts(config)
    first = _session(path, config, intra, inter)
    _check(config, "input", config.inputs, first.get_inputs(), path)
    _check(config, "output", config.outputs, first.get_outputs(), path)
    sessions = [first] + [_session(path, config, intra, inter) for _ in range(1, max(1, config.instance_count))]
    return BatchedModel(config, [OnnxExecutor(s, config) for s in sessions])
