"""config.pbtxt -> TensorModelConfig: Triton's ModelConfig parsed with protobuf's text format (the
message the tritonclient wheel ships), every field checked (config_fields.py refuses what trtserve
does not honour), labels read; and what the repository derives from it (versions, metadata)."""

from __future__ import annotations

from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as pb

from trtserve.engine.errors import UserError
from trtserve.tensor.config_fields import refuse_unsupported
from trtserve.tensor.kinds import KINDS, KindSpec, kind_of
from trtserve.tensor.onnx_graph import DEFAULT_MAX_BATCH_SIZE, complete_config, config_from_onnx
from trtserve.tensor.types import (
    DATATYPES,
    DynamicBatching,
    EnsembleStep,
    QueuePolicy,
    TensorModelConfig,
    TensorSpec,
)

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_MAX_BATCH_SIZE",
    "config_from_onnx",
    "metadata",
    "parse_config",
    "read_config",
    "select_versions",
]

CONFIG_FILE = "config.pbtxt"
_KSERVE = {type_name: datatype for datatype, (_, type_name) in DATATYPES.items()}  # TYPE_FP32 -> FP32


def read_config(model_dir: Path, name: str) -> TensorModelConfig:
    """model_dir/config.pbtxt (labels files beside it) as a validated config; UserError otherwise."""
    path = Path(model_dir) / CONFIG_FILE
    if not path.is_file():
        raise UserError(
            f"model {name!r}: {path} is missing; write a Triton config.pbtxt there (backend, inputs, outputs) "
            f"or build the model with `trtserve build model.onnx -o {model_dir}`"
        )
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"model {name!r}: cannot read {path} ({err}); make it a readable UTF-8 text file") from None
    return parse_config(text, name, Path(model_dir))


def parse_config(text: str, name: str, base_dir: Path) -> TensorModelConfig:
    """One config.pbtxt's text for the model `name` (its directory's name); `base_dir` holds its labels."""
    where = f"model {name!r} ({Path(base_dir) / CONFIG_FILE})"
    msg = pb.ModelConfig()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as err:
        raise UserError(f"{where}: config.pbtxt does not parse at {err}; fix that line") from None
    refuse_unsupported(msg, where)
    if msg.name and msg.name != name:
        raise UserError(
            f"{where}: name {msg.name!r} differs from the model's directory name {name!r}; rename one or leave name out"
        )
    spec = _kind(msg, where, name)
    if msg.max_batch_size < 0:
        raise UserError(f"{where}: max_batch_size is {msg.max_batch_size}; give 0 (no batch dim) or a size > 0")
    _check_version_policy(msg, where)
    if spec.name == "onnx":
        complete_config(msg, Path(base_dir), where)
    inputs = _tensors(msg.input, "input", where, Path(base_dir))
    outputs = _tensors(msg.output, "output", where, Path(base_dir))
    ensemble = _ensemble(msg, spec, inputs, outputs, where, name)
    msg.name = name
    if not msg.platform and spec.platforms:
        msg.platform = spec.platforms[0]
    if not msg.backend and spec.backends:
        msg.backend = spec.backends[0]
    return TensorModelConfig(
        name=name,
        kind=spec.name,
        platform=spec.metadata_platform,
        max_batch_size=msg.max_batch_size,
        inputs=inputs,
        outputs=outputs,
        dynamic_batching=_dynamic_batching(msg, where),
        instance_count=_instance_count(msg, where),
        ensemble=ensemble,
        parameters={k: v.string_value for k, v in msg.parameters.items()},
        default_model_filename=msg.default_model_filename,
        raw=json_format.MessageToDict(msg, preserving_proto_field_name=True),
    )


def _kind(msg: pb.ModelConfig, where: str, name: str) -> KindSpec:
    spec = kind_of(msg.platform, msg.backend, name)
    if msg.platform and msg.backend:
        by_platform, by_backend = kind_of(msg.platform, "", name), kind_of("", msg.backend, name)
        if by_platform.name != by_backend.name:
            raise UserError(
                f"{where}: platform {msg.platform!r} and backend {msg.backend!r} name different kinds of model; "
                "set only one of them"
            )
    return spec


def _check_version_policy(msg: pb.ModelConfig, where: str) -> None:
    policy = msg.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "latest" and policy.latest.num_versions < 1:
        raise UserError(f"{where}: version_policy latest needs num_versions >= 1; set it or use `all {{ }}`")
    if choice == "specific" and not policy.specific.versions:
        raise UserError(f"{where}: version_policy specific lists no versions; list them, e.g. versions: [ 1 ]")


def _tensors(items, io: str, where: str, base_dir: Path) -> tuple[TensorSpec, ...]:
    if not items:
        raise UserError(f"{where}: config.pbtxt lists no {io}; list each {io} with its name, data_type and dims")
    seen: set[str] = set()
    specs = []
    for i, t in enumerate(items):
        if not t.name:
            raise UserError(f"{where}: {io}[{i}] has no name; give each {io} the model's tensor name")
        if t.name in seen:
            raise UserError(f"{where}: {io} {t.name!r} is listed twice; list each {io} once")
        seen.add(t.name)
        specs.append(_tensor(t, io, where, base_dir))
    return tuple(specs)


def _tensor(t, io: str, where: str, base_dir: Path) -> TensorSpec:
    what = f"{where}: {io} {t.name!r}"
    type_name = pb.DataType.Name(t.data_type)
    if type_name not in _KSERVE:
        served = ", ".join(_KSERVE)
        raise UserError(f"{what} has data_type {type_name}, which trtserve does not serve; use one of {served}")
    dims = tuple(t.dims)
    if not dims:
        raise UserError(f"{what} has no dims; list its shape without the batch dim, e.g. dims: [ 16 ] (-1: any size)")
    if any(d <= 0 and d != -1 for d in dims):
        raise UserError(f"{what} has dims {list(dims)}; each must be a size > 0, or -1 for any size")
    if t.HasField("reshape") and tuple(t.reshape.shape) != dims:
        raise UserError(
            f"{what} reshapes {list(dims)} to {list(t.reshape.shape)}, which trtserve does not do; "
            "give dims the model's own shape and remove reshape"
        )
    labels = _labels(base_dir, t.label_filename, what) if io == "output" and t.label_filename else None
    return TensorSpec(t.name, _KSERVE[type_name], dims, optional=io == "input" and t.optional, labels=labels)


def _labels(base_dir: Path, filename: str, what: str) -> tuple[str, ...]:
    """label_filename's lines (one label per class index), from the model's directory only."""
    path = (base_dir / filename).resolve()
    if not path.is_relative_to(base_dir.resolve()):
        raise UserError(f"{what} has label_filename {filename!r} outside the model's directory; put the file there")
    try:
        return tuple(path.read_text().splitlines())
    except FileNotFoundError:
        raise UserError(
            f"{what} has label_filename {filename!r}, but {path} does not exist; put the labels there, one a line"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{what}: cannot read its labels {path} ({err}); make it a UTF-8 text file") from None


def _dynamic_batching(msg: pb.ModelConfig, where: str) -> DynamicBatching | None:
    if not msg.HasField("dynamic_batching"):
        return None
    db, most = msg.dynamic_batching, msg.max_batch_size
    if most <= 0:
        raise UserError(
            f"{where}: dynamic_batching needs max_batch_size > 0 (the model's batch dim); "
            "set max_batch_size or remove dynamic_batching"
        )
    for size in db.preferred_batch_size:
        if not 1 <= size <= most:
            raise UserError(
                f"{where}: dynamic_batching.preferred_batch_size {size} is outside 1..max_batch_size ({most}); "
                "drop it or raise max_batch_size"
            )
    levels, default = db.priority_levels, db.default_priority_level
    if levels and not 1 <= default <= levels:
        raise UserError(
            f"{where}: dynamic_batching.default_priority_level {default} is not one of the levels 1..{levels} "
            "that priority_levels gives; set it in that range"
        )
    if not levels and default:
        raise UserError(
            f"{where}: dynamic_batching.default_priority_level is {default} but priority_levels is not set; "
            "set priority_levels or remove default_priority_level"
        )
    for level in db.priority_queue_policy:
        if not 1 <= level <= levels:
            raise UserError(
                f"{where}: dynamic_batching.priority_queue_policy has level {level}, outside 1..{levels} "
                "(priority_levels); key it by an existing level"
            )
    return DynamicBatching(
        preferred_batch_size=tuple(db.preferred_batch_size),
        max_queue_delay_us=db.max_queue_delay_microseconds,
        preserve_ordering=db.preserve_ordering,
        priority_levels=levels,
        default_priority_level=default,
        default_queue_policy=_queue_policy(db.default_queue_policy),
        priority_queue_policy={level: _queue_policy(p) for level, p in sorted(db.priority_queue_policy.items())},
    )


def _queue_policy(p: pb.ModelQueuePolicy) -> QueuePolicy:
    return QueuePolicy(
        timeout_action=pb.ModelQueuePolicy.TimeoutAction.Name(p.timeout_action),
        default_timeout_us=p.default_timeout_microseconds,
        allow_timeout_override=p.allow_timeout_override,
        max_queue_size=p.max_queue_size,
    )


def _instance_count(msg: pb.ModelConfig, where: str) -> int:
    total = 0
    for i, group in enumerate(msg.instance_group):
        kind = pb.ModelInstanceGroup.Kind.Name(group.kind)
        if kind not in ("KIND_CPU", "KIND_AUTO"):
            raise UserError(
                f"{where}: instance_group[{i}] has kind {kind}, but tensor models run on the CPU here; "
                "use KIND_CPU or KIND_AUTO"
            )
        if group.count < 0:
            raise UserError(f"{where}: instance_group[{i}] has count {group.count}; give a count >= 1")
        total += group.count or 1  # Triton's default count is 1
    return total or 1


def _ensemble(
    msg: pb.ModelConfig, spec: KindSpec, inputs: tuple, outputs: tuple, where: str, name: str
) -> tuple[EnsembleStep, ...]:
    """The steps of an ensemble, checked as a DAG over its tensors; () for other kinds."""
    if spec.name != "ensemble":
        if msg.HasField("ensemble_scheduling"):
            raise UserError(f'{where}: ensemble_scheduling needs platform "ensemble"; set it or remove the steps')
        return ()
    # dynamic_batching is refused by the parse: it shares a oneof with ensemble_scheduling
    if msg.instance_group:
        raise UserError(
            f"{where}: an ensemble has no instance_group of its own (its steps' models have theirs); remove it"
        )
    steps = msg.ensemble_scheduling.step
    if not steps:
        raise UserError(
            f'{where}: platform "ensemble" needs ensemble_scheduling with at least one step; '
            "add steps with model_name, input_map and output_map"
        )
    sources = {t.name for t in inputs}
    writer: dict[str, int] = {}  # ensemble tensor -> the step that writes it
    for i, s in enumerate(steps):
        what = f"{where}: ensemble step {i} ({s.model_name or 'no model_name'})"
        if not s.model_name or s.model_name == name:
            raise UserError(f"{what} needs model_name naming another model of the repository")
        if s.model_version != -1 and s.model_version < 1:
            raise UserError(f"{what} has model_version {s.model_version}; give -1 (the routed version) or a version")
        if not s.input_map or not s.output_map:
            raise UserError(f"{what} needs input_map and output_map (step tensor -> ensemble tensor)")
        for tensor in s.output_map.values():
            if tensor in sources:
                raise UserError(f"{what} writes {tensor!r}, an ensemble input; write a tensor of another name")
            if tensor in writer:
                raise UserError(
                    f"{what} writes {tensor!r}, which step {writer[tensor]} writes too; give each tensor one writer"
                )
            writer[tensor] = i
    for i, s in enumerate(steps):
        for key, tensor in s.input_map.items():
            if tensor not in sources and tensor not in writer:
                raise UserError(
                    f"{where}: ensemble step {i} ({s.model_name}) reads {tensor!r} for its input {key!r}, which is "
                    "neither an ensemble input nor a step's output; map it from one of "
                    + ", ".join(sorted(sources | set(writer)))
                )
    for t in outputs:
        if t.name not in writer:
            raise UserError(f"{where}: ensemble output {t.name!r} is written by no step; add it to a step's output_map")
    _check_acyclic(steps, writer, where)
    return tuple(EnsembleStep(s.model_name, s.model_version, dict(s.input_map), dict(s.output_map)) for s in steps)


def _check_acyclic(steps, writer: dict[str, int], where: str) -> None:
    graph = {i: {writer[t] for t in s.input_map.values() if t in writer} for i, s in enumerate(steps)}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as err:
        cycle = set(err.args[1])
        tensors = sorted(t for i in cycle for t in steps[i].input_map.values() if writer.get(t) in cycle)
        raise UserError(
            f"{where}: ensemble steps form a cycle through tensors {', '.join(tensors)}; "
            "a step may only read ensemble inputs and earlier steps' outputs"
        ) from None


def select_versions(config: TensorModelConfig | dict, available: list[int]) -> list[int]:
    """The versions Triton's version_policy serves out of `available` (ascending): latest
    {num_versions} (default 1), all, or specific {versions} (each must exist)."""
    raw = config.raw if isinstance(config, TensorModelConfig) else config
    policy = raw.get("version_policy") or {"latest": {}}
    have = sorted(set(available))
    if "all" in policy:
        return have
    if "specific" in policy:
        wanted = sorted({int(v) for v in policy["specific"].get("versions", [])})
        missing = [v for v in wanted if v not in have]
        if missing:
            raise UserError(
                f"model {raw.get('name', '?')!r}: version_policy specific lists version(s) "
                f"{', '.join(map(str, missing))}, but its directory has {', '.join(map(str, have)) or 'none'}; "
                "add those version directories or change version_policy"
            )
        return wanted
    n = int(policy.get("latest", {}).get("num_versions", 1)) or 1
    return have[-n:]


def metadata(config: TensorModelConfig, versions: list[str]) -> dict:
    """KServe v2 model metadata; shapes carry -1 for the batch dim when the model batches."""
    batch = [-1] if config.max_batch_size > 0 else []

    def tensors(specs: tuple[TensorSpec, ...]) -> list[dict]:
        return [{"name": t.name, "datatype": t.datatype, "shape": batch + list(t.dims)} for t in specs]

    return {
        "name": config.name,
        "versions": [str(v) for v in versions],
        "platform": KINDS[config.kind].metadata_platform,
        "inputs": tensors(config.inputs),
        "outputs": tensors(config.outputs),
    }
