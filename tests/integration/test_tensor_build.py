"""`trtserve build model.onnx -o DIR`: an engine dir that verifies, whose model.onnx runs in ONNX
Runtime exactly as the source does and whose config.pbtxt reads back; broken graphs and bad flags
leave nothing behind; `--backend tensorrt` plans (or runs) trtexec."""

from __future__ import annotations

import json
import shlex

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from tensor_models import mlp_onnx

from trtserve.cli import main
from trtserve.engine.manifest import verify_engine_dir
from trtserve.tensor.config import read_config


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    return mlp_onnx(tmp_path_factory.mktemp("src") / "mlp.onnx", sizes=(32, 64, 10))


def build(tmp_path, *args):
    """Run the CLI into tmp_path/out/mlp; return (exit code, output, engine dir); no staging dir is left."""
    out = tmp_path / "out" / "mlp"
    result = CliRunner().invoke(main, ["build", *map(str, args), "-o", str(out), "--quiet"])
    leftovers = list((tmp_path / "out").glob(".mlp.*")) if (tmp_path / "out").exists() else []
    assert not leftovers, leftovers
    return result.exit_code, result.output, out


def refused(tmp_path, fragment, *args):
    """The build fails with one clear line and leaves the engine dir as it was (absent, or the old one)."""
    before = _files(tmp_path / "out" / "mlp")
    code, output, out = build(tmp_path, *args)
    assert code == 2, output
    assert fragment in output, output
    assert "Traceback" not in output
    assert _files(out) == before
    return output


def _files(engine_dir):
    return {p.name: p.read_bytes() for p in engine_dir.iterdir()} if engine_dir.exists() else None


def run(path, x):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_build_writes_a_verified_engine_dir_that_runs_like_the_source(tmp_path, mlp):
    lock = tmp_path / "engine.lock"
    code, output, out = build(tmp_path, mlp, "--lock", lock)
    assert code == 0, output
    assert sorted(p.name for p in out.iterdir()) == ["config.pbtxt", "manifest.json", "model.onnx"]
    manifest = verify_engine_dir(out)
    assert manifest.backend == "onnxruntime" and manifest.source["kind"] == "onnx"
    assert manifest.source["path"] == str(mlp) and manifest.source["fingerprint"].startswith("sha256:")
    assert json.loads(lock.read_text())["files"].keys() == {"config.pbtxt", "model.onnx"}
    config = read_config(out, "mlp")  # no `name` in the file: the dir names it
    assert (config.name, config.kind, config.max_batch_size) == ("mlp", "onnx", 8)
    assert config.dynamic_batching is not None and config.inputs[0].dims == (32,)
    x = np.random.default_rng(1).standard_normal((5, 32)).astype(np.float32)
    np.testing.assert_array_equal(run(out / "model.onnx", x), run(mlp, x))


def test_inspect_describes_a_tensor_engine_dir(tmp_path, mlp):
    code, output, out = build(tmp_path, mlp, "--max-batch-size", "16")
    assert code == 0, output
    result = CliRunner().invoke(main, ["inspect", str(out), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert (info["backend"], info["platform"], info["max_batch_size"]) == ("onnxruntime", "onnxruntime_onnx", 16)
    assert info["inputs"] == {"x": "FP32[32]"} and info["outputs"] == {"y": "FP32[10]"}
    assert info["weight_bytes"] == (out / "model.onnx").stat().st_size


def test_max_batch_size_and_force(tmp_path, mlp):
    assert build(tmp_path, mlp)[0] == 0
    refused_again = CliRunner().invoke(main, ["build", str(mlp), "-o", str(tmp_path / "out" / "mlp")])
    assert refused_again.exit_code == 2 and "already exists; pass --force" in refused_again.output
    code, output, out = build(tmp_path, mlp, "--max-batch-size", "32", "--force")
    assert code == 0, output
    assert read_config(out, "mlp").max_batch_size == 32
    verify_engine_dir(out)


def test_a_graph_without_a_batch_dim(tmp_path):
    fixed = mlp_onnx(tmp_path / "fixed.onnx", sizes=(4, 2), batch_dim=False)
    code, output, out = build(tmp_path, fixed)
    assert code == 0, output
    config = read_config(out, "mlp")
    assert config.max_batch_size == 0 and config.dynamic_batching is None and config.inputs[0].dims == (1, 4)
    refused(tmp_path, "--max-batch-size needs a dynamic first (batch) dim", fixed, "--max-batch-size", "4", "--force")


def _save(path, nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "broken", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))
    return path


def test_broken_graphs_leave_nothing(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x07 this is not an onnx graph \xff\xfe" * 40)
    refused(tmp_path, "is not an ONNX model", junk)
    unknown = _save(
        tmp_path / "unknown.onnx",
        [helper.make_node("NoSuchOp", ["x"], ["y"])],
        [x],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])],
    )
    refused(tmp_path, "is not a valid ONNX model", unknown)
    # declares y as (b, 3) but Identity gives (b, 4): ONNX Runtime's trial run catches it
    lying = _save(
        tmp_path / "lying.onnx",
        [helper.make_node("Identity", ["x"], ["y"])],
        [x],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 3])],
    )
    refused(tmp_path, "lying.onnx is not a valid ONNX model", lying)
    fixed = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    # past the checker (its shape inference cannot see the element count or NonZero's output size):
    # ONNX Runtime's trial run on zeros catches both
    reshape = _save(
        tmp_path / "reshape.onnx",
        [helper.make_node("Reshape", ["x", "s"], ["y"])],
        [fixed],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.array([3], np.int64), "s")],
    )
    refused(tmp_path, "ONNX Runtime fails to run", reshape)
    nonzero = _save(
        tmp_path / "nonzero.onnx",
        [helper.make_node("NonZero", ["x"], ["y"])],
        [fixed],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2, 3])],
    )
    refused(tmp_path, "ONNX output 'y' comes out as [2, 0] but the graph declares [2, 3]", nonzero)
    refused(tmp_path, "does not exist; give the path of a .onnx file", tmp_path / "missing.onnx")


def test_llm_flags_are_refused_for_onnx(tmp_path, mlp):
    refused(
        tmp_path,
        "--quant, --dtype: LLM builds only; a .onnx MODEL takes",
        mlp,
        "--quant",
        "w8a16",
        "--dtype",
        "float16",
    )
    refused(tmp_path, "--backend torch builds LLM checkpoints", mlp, "--backend", "torch")


def test_tensorrt_dry_run_prints_the_trtexec_plan(tmp_path, mlp):
    code, output, out = build(tmp_path, mlp, "--backend", "tensorrt", "--dry-run", "--max-batch-size", "16")
    assert code == 0, output
    assert not out.exists() and "dry run: nothing was written" in output
    line = next(ln.strip() for ln in output.splitlines() if ln.strip().startswith("trtexec "))
    assert shlex.split(line) == [
        "trtexec",
        f"--onnx={mlp}",
        f"--saveEngine={out / 'model.plan'}",
        "--minShapes=x:1x32",
        "--optShapes=x:8x32",
        "--maxShapes=x:16x32",
    ]
    assert 'platform: "tensorrt_plan"' in output and "max_batch_size: 16" in output
    assert "TensorrtExecutionProvider" in output


def test_tensorrt_without_trtexec_refuses(tmp_path, mlp, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    refused(tmp_path, "TensorRT is not installed here; add --dry-run", mlp, "--backend", "tensorrt")


def test_tensorrt_runs_trtexec_when_present(tmp_path, mlp, monkeypatch):
    """A stand-in trtexec records its argv as the plan: the build passes the planned flags and ships its output."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "trtexec"
    fake.write_text(
        "#!/usr/bin/env python3\nimport sys\n"
        "out = next(a.split('=', 1)[1] for a in sys.argv if a.startswith('--saveEngine='))\n"
        "open(out, 'w').write(' '.join(sys.argv[1:]))\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    code, output, out = build(tmp_path, mlp, "--backend", "tensorrt", "--max-batch-size", "4")
    assert code == 0, output
    assert sorted(p.name for p in out.iterdir()) == ["config.pbtxt", "manifest.json", "model.plan"]
    argv = (out / "model.plan").read_text().split()
    assert argv[0] == f"--onnx={mlp}" and argv[2:] == ["--minShapes=x:1x32", "--optShapes=x:2x32", "--maxShapes=x:4x32"]
    assert verify_engine_dir(out).backend == "tensorrt_plan"
    assert 'platform: "tensorrt_plan"' in (out / "config.pbtxt").read_text()


def test_external_weights_travel_with_the_engine_dir(tmp_path, mlp):
    src = tmp_path / "ext" / "mlp.onnx"
    src.parent.mkdir()
    model = onnx.load(str(mlp))
    onnx.save_model(model, str(src), save_as_external_data=True, location="weights.bin", size_threshold=0)
    code, output, out = build(tmp_path, src)
    assert code == 0, output
    assert sorted(p.name for p in out.iterdir()) == ["config.pbtxt", "manifest.json", "model.onnx", "model.onnx.data"]
    verify_engine_dir(out)
    (src.parent / "weights.bin").unlink()  # the engine dir does not read the source's files
    x = np.random.default_rng(2).standard_normal((3, 32)).astype(np.float32)
    np.testing.assert_array_equal(run(out / "model.onnx", x), run(mlp, x))


def test_the_built_dir_opens_as_a_batched_tensor_model(tmp_path, mlp):
    """What serving does with the dir: read its config.pbtxt, open model.onnx behind the dynamic batcher."""
    import asyncio

    from trtserve.tensor.kinds import open_model
    from trtserve.tensor.types import InferRequest

    code, output, out = build(tmp_path, mlp)
    assert code == 0, output
    model = open_model(read_config(out, "mlp"), out, lambda name, version: None)
    x = np.random.default_rng(3).standard_normal((6, 32)).astype(np.float32)

    async def infer_each_row():
        return await asyncio.gather(*(model.infer(InferRequest({"x": x[i : i + 1]})) for i in range(len(x))))

    try:
        results = asyncio.run(infer_each_row())
    finally:
        model.shutdown()
    np.testing.assert_allclose(np.concatenate([r["y"] for r in results]), run(mlp, x), rtol=1e-5, atol=1e-5)
    assert model.stats.inference_count == 6
