"""config.pbtxt -> TensorModelConfig: Triton's ModelConfig read with protobuf, every refusal naming
its field; version policy; KServe metadata; config.pbtxt derived from an ONNX graph."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from onnx import TensorProto, helper
from tensor_models import mlp_onnx
from tritonclient.grpc import model_config_pb2 as pb

from trtserve.engine.errors import UserError
from trtserve.tensor.config import config_from_onnx, metadata, parse_config, read_config, select_versions
from trtserve.tensor.types import QueuePolicy

CLASSIFIER = """
backend: "onnxruntime"
max_batch_size: 16
input [ { name: "x", data_type: TYPE_FP32, dims: [ 3, -1 ] } ]
output [ { name: "probs", data_type: TYPE_FP32, dims: [ 4 ], label_filename: "labels.txt" } ]
instance_group [ { kind: KIND_CPU, count: 2 }, { count: 1 } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 2
  default_queue_policy { max_queue_size: 5 }
  priority_queue_policy { key: 1 value { timeout_action: DELAY, default_timeout_microseconds: 7,
                                         allow_timeout_override: true } }
}
parameters { key: "intra_op_thread_count" value { string_value: "2" } }
"""
PLAIN = """
backend: "onnxruntime"
input [ { name: "x", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 2 ] } ]
"""
ENSEMBLE = """
platform: "ensemble"
max_batch_size: 8
input [ { name: "IMAGE", data_type: TYPE_STRING, dims: [ 1 ] } ]
output [ { name: "LABELS", data_type: TYPE_STRING, dims: [ 3 ] } ]
ensemble_scheduling { step [
  { model_name: "pre", model_version: -1, input_map { key: "in" value: "IMAGE" }, output_map { key: "out" value: "pixels" } },
  { model_name: "net", model_version: -1, input_map { key: "x" value: "pixels" }, output_map { key: "y" value: "logits" } },
  { model_name: "post", model_version: 1, input_map { key: "l" value: "logits" }, output_map { key: "t" value: "LABELS" } }
] }
"""


@pytest.fixture
def model_dir(tmp_path):
    d = tmp_path / "clf"
    d.mkdir()
    (d / "labels.txt").write_text("cat\ndog\nbird\nfish\n")
    return d


def refused(text: str, base, *fragments: str, name: str = "clf") -> str:
    with pytest.raises(UserError) as err:
        parse_config(text, name, base)
    message = str(err.value)
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message
    return message


def test_classifier_config_reads_every_field(model_dir):
    (model_dir / "config.pbtxt").write_text(CLASSIFIER)
    c = read_config(model_dir, "clf")
    assert (c.name, c.kind, c.platform, c.max_batch_size, c.instance_count) == (
        "clf",
        "onnx",
        "onnxruntime_onnx",
        16,
        3,
    )
    assert c.inputs[0].name == "x" and c.inputs[0].datatype == "FP32" and c.inputs[0].dims == (3, -1)
    assert c.outputs[0].labels == ("cat", "dog", "bird", "fish")
    db = c.dynamic_batching
    assert db.preferred_batch_size == (4, 8) and db.max_queue_delay_us == 100
    assert (db.priority_levels, db.default_priority_level) == (2, 2)
    assert db.default_queue_policy == QueuePolicy(max_queue_size=5)
    assert db.policy(1) == QueuePolicy("DELAY", 7, True, 0) and db.policy(2) == db.default_queue_policy
    assert c.parameters == {"intra_op_thread_count": "2"}
    # raw is the ModelConfig as JSON, named and with the platform Triton fills in
    assert c.raw["name"] == "clf" and c.raw["platform"] == "onnxruntime_onnx" and c.raw["backend"] == "onnxruntime"
    assert c.raw["instance_group"][0] == {"kind": "KIND_CPU", "count": 2}


def test_defaults_without_batching(model_dir):
    c = parse_config(PLAIN, "clf", model_dir)
    assert c.dynamic_batching is None and c.max_batch_size == 0 and c.instance_count == 1
    assert parse_config('platform: "onnxruntime_onnx"' + PLAIN.replace('backend: "onnxruntime"', ""), "clf", model_dir)


def test_missing_config_says_what_to_write(tmp_path):
    with pytest.raises(UserError, match="config.pbtxt is missing; write a Triton config.pbtxt"):
        read_config(tmp_path, "m")


def test_parse_error_quotes_line_and_column(model_dir):
    refused(PLAIN + "\nmax_batch_size: eight\n", model_dir, "config.pbtxt does not parse at 6:17", "clf")
    refused(PLAIN + "\nnot_a_field: 1\n", model_dir, "has no field named", "not_a_field")


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("sequence_batching { }", "sequence_batching"),
        ('model_warmup [ { name: "w" batch_size: 1 } ]', "model_warmup"),
        ("response_cache { enable: true }", "response_cache.enable"),
        ('batch_input [ { kind: BATCH_ELEMENT_COUNT, target_name: "n", data_type: TYPE_INT32 } ]', "batch_input"),
        ('model_repository_agents { agents [ { name: "checksum" } ] }', "model_repository_agents"),
        ("model_transaction_policy { decoupled: true }", "model_transaction_policy.decoupled"),
        (
            'optimization { execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt" } ] } }',
            "optimization.execution_accelerators",
        ),
        ("optimization { cuda { graphs: true } }", "optimization.cuda"),
        ("instance_group [ { kind: KIND_CPU, gpus: [ 0 ] } ]", "instance_group.gpus"),
        ('metric_tags { key: "a" value: "b" }', "metric_tags"),
        ('runtime: "libtriton_onnxruntime.so"', "runtime"),
    ],
)
def test_unsupported_fields_are_refused_by_name(model_dir, extra, field):
    refused(PLAIN + extra, model_dir, f"sets {field}, which trtserve does not honour", "remove")


def test_fields_left_at_their_defaults_pass(model_dir):
    extra = "response_cache { enable: false } model_transaction_policy { decoupled: false } "
    extra += "optimization { input_pinned_memory { enable: true } }"
    assert parse_config(PLAIN + extra, "clf", model_dir).name == "clf"


def test_tensor_field_refusals(model_dir):
    shape = PLAIN.replace("dims: [ 4 ] }", "dims: [ 4 ], is_shape_tensor: true }")
    refused(shape, model_dir, "input.is_shape_tensor")
    ragged = PLAIN.replace("dims: [ 4 ] }", "dims: [ 4 ], allow_ragged_batch: true }")
    refused(ragged, model_dir, "input.allow_ragged_batch")
    reshape = PLAIN.replace("dims: [ 4 ] }", "dims: [ 4 ], reshape { shape: [ 2, 2 ] } }")
    refused(reshape, model_dir, "input 'x' reshapes [4] to [2, 2]", "remove reshape")
    same = PLAIN.replace("dims: [ 4 ] }", "dims: [ 4 ], reshape { shape: [ 4 ] } }")
    assert parse_config(same, "clf", model_dir).inputs[0].dims == (4,)


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        (('backend: "onnxruntime"', 'name: "other" backend: "onnxruntime"'), ("name 'other' differs", "'clf'")),
        (('backend: "onnxruntime"', 'backend: "pytorch"'), ("backend 'pytorch'", "trtserve serves")),
        (('backend: "onnxruntime"', 'backend: "onnxruntime" platform: "ensemble"'), ("name different kinds",)),
        (("dims: [ 4 ]", "dims: [ 4, 0 ]"), ("input 'x' has dims [4, 0]", "-1 for any size")),
        (("dims: [ 4 ]", "dims: [ ]"), ("input 'x' has no dims",)),
        (("TYPE_FP32, dims: [ 4 ]", "TYPE_INVALID, dims: [ 4 ]"), ("data_type TYPE_INVALID",)),
        (("TYPE_FP32, dims: [ 4 ]", "TYPE_BF16, dims: [ 4 ]"), ("data_type TYPE_BF16", "use one of")),
        (
            ("dims: [ 2 ] }", 'dims: [ 2 ] }, { name: "y", data_type: TYPE_FP32, dims: [ 1 ] }'),
            ("output 'y' is listed twice",),
        ),
        (('output [ { name: "y", data_type: TYPE_FP32, dims: [ 2 ] } ]', ""), ("lists no output",)),
        (('name: "y", data_type', "data_type"), ("output[0] has no name",)),
    ],
)
def test_model_and_tensor_errors(model_dir, change, fragments):
    refused(PLAIN.replace(*change), model_dir, *fragments)


def test_labels_file_must_exist_inside_the_model_dir(model_dir):
    missing = CLASSIFIER.replace("labels.txt", "nope.txt")
    refused(missing, model_dir, "label_filename 'nope.txt'", "does not exist")
    (model_dir.parent / "secret.txt").write_text("x\n")
    refused(CLASSIFIER.replace("labels.txt", "../secret.txt"), model_dir, "outside the model's directory")


@pytest.mark.parametrize(
    ("old", "new", "fragments"),
    [
        ("max_batch_size: 16", "max_batch_size: 0", ("dynamic_batching needs max_batch_size > 0",)),
        ("max_batch_size: 16", "max_batch_size: -2", ("max_batch_size is -2",)),
        ("[ 4, 8 ]", "[ 4, 32 ]", ("preferred_batch_size 32 is outside 1..max_batch_size (16)",)),
        ("default_priority_level: 2", "default_priority_level: 3", ("default_priority_level 3", "1..2")),
        ("priority_levels: 2\n", "", ("priority_levels is not set",)),
        ("key: 1 value", "key: 5 value", ("priority_queue_policy has level 5",)),
        ("kind: KIND_CPU, count: 2", "kind: KIND_GPU, count: 2", ("instance_group[0] has kind KIND_GPU", "KIND_CPU")),
        ("kind: KIND_CPU, count: 2", "kind: KIND_MODEL", ("kind KIND_MODEL",)),
        ("count: 1 }", "count: -1 }", ("instance_group[1] has count -1",)),
    ],
)
def test_batching_and_instance_errors(model_dir, old, new, fragments):
    assert old in CLASSIFIER
    refused(CLASSIFIER.replace(old, new), model_dir, *fragments)


def test_ensemble_steps(tmp_path):
    c = parse_config(ENSEMBLE, "ens", tmp_path)
    assert c.kind == "ensemble" and c.platform == "ensemble" and c.dynamic_batching is None
    assert [s.model_name for s in c.ensemble] == ["pre", "net", "post"]
    assert c.ensemble[0].input_map == {"in": "IMAGE"} and c.ensemble[2].model_version == 1
    assert c.outputs[0].datatype == "BYTES"


@pytest.mark.parametrize(
    ("old", "new", "fragments"),
    [
        ('value: "pixels" } }', 'value: "pixelz" } }', ("reads 'pixels' for its input 'x'", "map it from one of")),
        ('value: "LABELS"', 'value: "logits"', ("writes 'logits', which step 1 writes too",)),
        ('key: "t" value: "LABELS"', 'key: "t" value: "other"', ("ensemble output 'LABELS' is written by no step",)),
        ('key: "out" value: "pixels"', 'key: "out" value: "IMAGE"', ("writes 'IMAGE', an ensemble input",)),
        ('model_name: "net"', 'model_name: "ens"', ("model_name naming another model",)),
        ("model_version: 1,", "model_version: 0,", ("model_version 0",)),
        (
            "max_batch_size: 8",
            "max_batch_size: 8 dynamic_batching { }",
            ("does not parse", 'along with field "dynamic_batching"'),
        ),
        ("max_batch_size: 8", "max_batch_size: 8 instance_group [ { count: 2 } ]", ("no instance_group",)),
    ],
)
def test_ensemble_errors(tmp_path, old, new, fragments):
    assert old in ENSEMBLE
    refused(ENSEMBLE.replace(old, new), tmp_path, *fragments, name="ens")


def test_ensemble_cycle_names_its_tensors(tmp_path):
    # pre reads `logits` (written by net), net reads `pixels` (written by pre): a cycle
    cyclic = ENSEMBLE.replace('input_map { key: "in" value: "IMAGE" }', 'input_map { key: "in" value: "logits" }')
    refused(cyclic, tmp_path, "form a cycle through tensors logits, pixels", name="ens")


def test_ensemble_scheduling_needs_the_ensemble_platform(tmp_path):
    refused(PLAIN + 'ensemble_scheduling { step [ { model_name: "a" } ] }', tmp_path, 'needs platform "ensemble"')
    no_steps = ENSEMBLE[: ENSEMBLE.index("ensemble_scheduling")]
    refused(no_steps, tmp_path, "needs ensemble_scheduling with at least one step", name="ens")


@pytest.mark.parametrize(
    ("policy", "available", "expected"),
    [
        ("", [1, 3, 2], [3]),
        ("version_policy { latest { num_versions: 2 } }", [1, 3, 2], [2, 3]),
        ("version_policy { all { } }", [3, 1], [1, 3]),
        ("version_policy { specific { versions: [ 1, 3 ] } }", [1, 2, 3], [1, 3]),
        ("", [], []),
    ],
)
def test_version_policy(model_dir, policy, available, expected):
    config = parse_config(PLAIN + policy, "clf", model_dir)
    assert select_versions(config, available) == expected
    assert select_versions(config.raw, available) == expected


def test_version_policy_errors(model_dir):
    config = parse_config(PLAIN + "version_policy { specific { versions: [ 1, 4 ] } }", "clf", model_dir)
    with pytest.raises(UserError, match="lists version.s. 4, but its directory has 1, 2; add those version"):
        select_versions(config, [1, 2])
    refused(PLAIN + "version_policy { latest { } }", model_dir, "num_versions >= 1")
    refused(PLAIN + "version_policy { specific { } }", model_dir, "lists no versions")


def test_metadata_prepends_the_batch_dim(model_dir):
    meta = metadata(parse_config(CLASSIFIER, "clf", model_dir), ["1", "2"])
    assert meta == {
        "name": "clf",
        "versions": ["1", "2"],
        "platform": "onnxruntime_onnx",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 3, -1]}],
        "outputs": [{"name": "probs", "datatype": "FP32", "shape": [-1, 4]}],
    }
    assert metadata(parse_config(PLAIN, "clf", model_dir), ["1"])["inputs"][0]["shape"] == [4]


def _graph(path, inputs, outputs):
    import onnx

    def info(name, elem, shape):
        return helper.make_tensor_value_info(name, elem, shape)

    graph = helper.make_graph(
        [helper.make_node("Identity", [inputs[0][0]], [outputs[0][0]])]
        + [helper.make_node("Identity", [i[0]], [o[0]]) for i, o in zip(inputs[1:], outputs[1:], strict=True)],
        "g",
        [info(*i) for i in inputs],
        [info(*o) for o in outputs],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


def test_from_onnx_detects_the_batch_dim(tmp_path):
    text = config_from_onnx(mlp_onnx(tmp_path / "m.onnx", sizes=(6, 5, 3)), "mlp", max_batch_size=32)
    msg = text_format.Parse(text, pb.ModelConfig())
    assert (msg.name, msg.backend, msg.max_batch_size) == ("mlp", "onnxruntime", 32)
    assert [(t.name, pb.DataType.Name(t.data_type), list(t.dims)) for t in msg.input] == [("x", "TYPE_FP32", [6])]
    assert [(t.name, list(t.dims)) for t in msg.output] == [("y", [3])]
    assert msg.HasField("dynamic_batching")
    config = parse_config(text, "mlp", tmp_path)  # what the build writes reads back
    assert config.dynamic_batching is not None and config.max_batch_size == 32


def test_from_onnx_default_and_symbolic_dims(tmp_path):
    path = _graph(
        tmp_path / "g.onnx",
        [("ids", TensorProto.INT64, ["n", "seq"]), ("mask", TensorProto.BOOL, [0, 4])],
        [("out", TensorProto.INT64, ["n", "seq"]), ("m", TensorProto.BOOL, [None, 4])],
    )
    config = parse_config(config_from_onnx(path), "g", tmp_path)
    assert config.max_batch_size == 8 and config.dynamic_batching is not None
    assert [(t.name, t.datatype, t.dims) for t in config.inputs] == [("ids", "INT64", (-1,)), ("mask", "BOOL", (4,))]


def test_from_onnx_without_a_batch_dim(tmp_path):
    path = mlp_onnx(tmp_path / "fixed.onnx", sizes=(6, 3), batch_dim=False)
    config = parse_config(config_from_onnx(path), "fixed", tmp_path)
    assert config.max_batch_size == 0 and config.dynamic_batching is None
    assert config.inputs[0].dims == (1, 6) and config.outputs[0].dims == (1, 3)
    with pytest.raises(UserError, match="needs a dynamic first .batch. dim on every input and output, but 'x'"):
        config_from_onnx(path, max_batch_size=4)


def test_from_onnx_refusals(tmp_path):
    c64 = _graph(
        tmp_path / "c.onnx", [("z", TensorProto.COMPLEX64, ["b", 2])], [("w", TensorProto.COMPLEX64, ["b", 2])]
    )
    with pytest.raises(UserError, match="ONNX input 'z' has element type COMPLEX64"):
        config_from_onnx(c64)
    only_batch = _graph(tmp_path / "v.onnx", [("v", TensorProto.FLOAT, ["b"])], [("u", TensorProto.FLOAT, ["b"])])
    with pytest.raises(UserError, match="'v' has only a batch dim"):
        config_from_onnx(only_batch)
    (tmp_path / "junk.onnx").write_bytes(b"\x00\x01 not a protobuf \xff" * 10)
    with pytest.raises(UserError, match="is not an ONNX model"):
        config_from_onnx(tmp_path / "junk.onnx")


def test_auto_complete_from_the_version_dirs_graph(tmp_path):
    """A Triton config.pbtxt naming only the backend takes its tensors from <newest version>/model.onnx."""
    d = tmp_path / "auto"
    mlp_onnx(d / "1" / "model.onnx", sizes=(5, 2))
    mlp_onnx(d / "3" / "model.onnx", sizes=(6, 3))
    config = parse_config('backend: "onnxruntime"', "auto", d)
    assert [(t.name, t.dims) for t in config.inputs + config.outputs] == [("x", (6,)), ("y", (3,))]
    assert config.max_batch_size == 8 and config.dynamic_batching is not None
    assert config.raw["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": ["6"]}]
    given = parse_config(
        'backend: "onnxruntime" max_batch_size: 2 dynamic_batching { max_queue_delay_microseconds: 5 }', "auto", d
    )
    assert given.max_batch_size == 2 and given.dynamic_batching.max_queue_delay_us == 5


def test_auto_complete_from_a_flat_build_dir(tmp_path):
    fixed = tmp_path / "fixed"
    mlp_onnx(fixed / "model.onnx", sizes=(4, 2), batch_dim=False)
    config = parse_config('platform: "onnxruntime_onnx"', "fixed", fixed)
    assert config.max_batch_size == 0 and config.dynamic_batching is None and config.inputs[0].dims == (1, 4)
    refused(
        'platform: "onnxruntime_onnx" max_batch_size: 4',
        fixed,
        "max_batch_size is 4 but",
        "no dynamic first",
        name="fixed",
    )
    # no graph to complete from: the missing tensors are named
    refused('backend: "onnxruntime"', tmp_path / "nothing", "lists no input", name="nothing")
