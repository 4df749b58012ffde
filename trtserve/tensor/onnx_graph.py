"""An ONNX graph's inputs and outputs, and the config.pbtxt derived from them (what Triton's
auto-complete would fill in): datatypes, dims, and a batch dim when every tensor's first dim is
dynamic. `onnx` is imported inside functions so reading a config.pbtxt does not load it."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from trtserve.engine.errors import UserError

# max_batch_size written for a graph with a dynamic batch dim when none is asked for. Triton's
# auto-complete uses 4; 8 lets the dynamic batcher amortize more of a small model's per-run cost.
DEFAULT_MAX_BATCH_SIZE = 8

# onnx.TensorProto element type name -> ModelConfig DataType name
ELEM_TYPES = {
    "FLOAT": "TYPE_FP32",
    "FLOAT16": "TYPE_FP16",
    "DOUBLE": "TYPE_FP64",
    "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "UINT8": "TYPE_UINT8",
    "UINT16": "TYPE_UINT16",
    "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64",
    "BOOL": "TYPE_BOOL",
    "STRING": "TYPE_STRING",
}


@dataclass(frozen=True)
class GraphTensor:
    name: str
    data_type: str  # ModelConfig DataType name ("TYPE_FP32", ...)
    shape: tuple[int | None, ...]  # None: a dynamic dim (symbolic, unknown or 0)


@dataclass(frozen=True)
class GraphIO:
    inputs: tuple[GraphTensor, ...]
    outputs: tuple[GraphTensor, ...]

    @property
    def batched(self) -> bool:
        """Whether every input and output has a dynamic first dim (Triton's implied batch dim)."""
        return all(t.shape and t.shape[0] is None for t in self.inputs + self.outputs)


def load_graph(onnx_path: Path):
    """The ModelProto (external weights not loaded); UserError if the file is not an ONNX model."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        return onnx.load(str(onnx_path), load_external_data=False)
    except (DecodeError, RuntimeWarning, ValueError) as err:
        raise UserError(f"{onnx_path} is not an ONNX model ({err}); export the model with torch.onnx or onnx") from None
    except OSError as err:
        raise UserError(
            f"cannot read {onnx_path} ({err.strerror or err}); check the path and its permissions"
        ) from None


def graph_io(model) -> GraphIO:
    """The graph's real inputs (initializers listed as inputs are weights) and outputs, with shapes
    from the graph or, where it has none, from ONNX shape inference."""
    import onnx

    graph = model.graph
    if any(not o.type.tensor_type.HasField("shape") for o in graph.output):
        # a best effort: an output still without a shape is named by _tensor below
        with contextlib.suppress(Exception):
            graph = onnx.shape_inference.infer_shapes(model).graph
    weights = {init.name for init in graph.initializer}
    inputs = tuple(_tensor(v, "input") for v in graph.input if v.name not in weights)
    return GraphIO(inputs, tuple(_tensor(v, "output") for v in graph.output))


def _tensor(value, io: str) -> GraphTensor:
    import onnx

    if value.type.WhichOneof("value") != "tensor_type":
        raise UserError(
            f"ONNX {io} {value.name!r} is a {value.type.WhichOneof('value')}, not a tensor; "
            "trtserve serves tensor inputs and outputs only"
        )
    tt = value.type.tensor_type
    elem = onnx.TensorProto.DataType.Name(tt.elem_type)
    if elem not in ELEM_TYPES:
        raise UserError(
            f"ONNX {io} {value.name!r} has element type {elem}, which trtserve does not serve; "
            f"export it as one of {', '.join(ELEM_TYPES)}"
        )
    if not tt.HasField("shape"):
        raise UserError(f"ONNX {io} {value.name!r} has no shape in the graph; export the model with shapes")
    shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim)
    if not shape:
        raise UserError(f"ONNX {io} {value.name!r} is a scalar; trtserve needs tensors of at least one dim")
    return GraphTensor(value.name, ELEM_TYPES[elem], shape)


def model_config(io: GraphIO, name: str = "", max_batch_size: int | None = None, platform: str = ""):
    """The ModelConfig message for the graph: backend onnxruntime (or `platform`), the batch dim
    split off when the graph has one (max_batch_size: that many at most), dynamic batching on."""
    from tritonclient.grpc import model_config_pb2 as pb

    if max_batch_size is not None and max_batch_size < 1:
        raise UserError(f"--max-batch-size {max_batch_size}: give a size >= 1")
    if max_batch_size is not None and not io.batched:
        fixed = next(t.name for t in io.inputs + io.outputs if t.shape[0] is not None)
        raise UserError(
            f"--max-batch-size needs a dynamic first (batch) dim on every input and output, but {fixed!r} has a "
            "fixed one; export the model with a dynamic batch axis or leave --max-batch-size out"
        )
    msg = pb.ModelConfig(name=name)
    if platform:
        msg.platform = platform
    else:
        msg.backend = "onnxruntime"
    skip = 1 if io.batched else 0
    msg.max_batch_size = (max_batch_size or DEFAULT_MAX_BATCH_SIZE) if io.batched else 0
    for tensors, field in ((io.inputs, msg.input), (io.outputs, msg.output)):
        for t in tensors:
            dims = [-1 if d is None else d for d in t.shape[skip:]]
            if not dims:
                raise UserError(
                    f"ONNX tensor {t.name!r} has only a batch dim; give it a trailing dim of 1 "
                    "(e.g. [batch, 1]) when exporting"
                )
            field.add(name=t.name, data_type=pb.DataType.Value(t.data_type), dims=dims)
    if io.batched:
        msg.dynamic_batching.SetInParent()
    return msg


def config_from_onnx(onnx_path: Path, name: str = "", max_batch_size: int | None = None, platform: str = "") -> str:
    """config.pbtxt text for the ONNX model at `onnx_path` (no `name` line when `name` is "": the
    directory the model is served from names it)."""
    msg = model_config(graph_io(load_graph(Path(onnx_path))), name, max_batch_size, platform)
    return config_text(msg, Path(onnx_path).name)


def config_text(msg, source_name: str) -> str:
    """A ModelConfig message as config.pbtxt text, with a line saying where it came from."""
    from google.protobuf import text_format

    return f"# derived from {source_name} by trtserve\n" + compact(text_format.MessageToString(msg))


def compact(text: str) -> str:
    """Protobuf text with each run of one repeated scalar (`dims: 3` `dims: 224`) written as a list,
    as Triton's own configs are (`dims: [ 3, 224 ]`); the parse is the same."""
    out: list[str] = []
    run: list[str] = []  # values of the current run
    key = ""
    for line in [*text.splitlines(), ""]:
        k, sep, value = line.partition(": ")
        if sep and k == key and not value.endswith("{"):
            run.append(value)
            continue
        if run:
            out.append(f"{key}: [ {', '.join(run)} ]" if len(run) > 1 else f"{key}: {run[0]}")
        run, key = ([value], k) if sep and not value.endswith("{") else ([], "")
        if not run:
            out.append(line)
    return "\n".join(out).rstrip("\n") + "\n"


def complete_config(msg, base_dir: Path, where: str) -> None:
    """Triton's auto-complete for an onnxruntime config.pbtxt that lists neither inputs nor outputs:
    fill them (and max_batch_size with dynamic batching, when the graph batches and none is set)
    from the graph in the model's directory (flat, as `trtserve build` writes it, or its newest
    version dir). Does nothing when the config lists tensors or no graph is found."""
    if msg.input or msg.output or not base_dir.is_dir():
        return
    filename = msg.default_model_filename or "model.onnx"
    versions = sorted((p for p in base_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name), reverse=True)
    graph = next((d / filename for d in [base_dir, *versions] if (d / filename).is_file()), None)
    if graph is None:
        return
    io = graph_io(load_graph(graph))
    if msg.max_batch_size and not io.batched:
        raise UserError(
            f"{where}: max_batch_size is {msg.max_batch_size} but {graph} has no dynamic first (batch) dim on every "
            "input and output; set max_batch_size: 0 or export the model with a batch axis"
        )
    filled = model_config(io, max_batch_size=msg.max_batch_size or None)
    msg.input.extend(filled.input)
    msg.output.extend(filled.output)
    if io.batched and not msg.max_batch_size:
        msg.max_batch_size = filled.max_batch_size
        if not msg.HasField("dynamic_batching"):
            msg.dynamic_batching.SetInParent()
