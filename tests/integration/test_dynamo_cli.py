"""`trtserve dynamo --dry-run`: the frontend and worker lines for each role, run nothing. A TensorRT-LLM
engine dir runs under Dynamo's own TensorRT-LLM worker with the options file trtserve wrote for it."""

import json
import shlex

from click.testing import CliRunner

from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.cli import main
from trtserve.engine.layout import HF_DIR, OPTIONS_FILE


def _lines(engine_dir, *args):
    result = CliRunner().invoke(main, ["dynamo", str(engine_dir), "--dry-run", *args])
    assert result.exit_code == 0, result.output
    return [shlex.split(line) for line in result.output.splitlines() if not line.startswith("#")]


def test_torch_engine_dir_runs_trtserve_workers(tiny_llama_engine):
    frontend, *workers = _lines(tiny_llama_engine, "--namespace", "ns1")
    assert frontend[:3] == ["python", "-m", "dynamo.frontend"] and "kv" in frontend
    assert [w[w.index("--role") + 1] for w in workers] == ["aggregated", "prefill", "decode"]
    assert all(w[:3] == ["trtserve", "dynamo", str(tiny_llama_engine)] and "ns1" in w for w in workers)


def test_trtllm_engine_dir_runs_dynamo_trtllm(tmp_path, tiny_llama):
    out = tmp_path / "trtllm-engine"
    build_engine(BuildConfig(model=str(tiny_llama), backend="trtllm", tokens_per_block=32), out, quiet=True)
    _, *workers = _lines(out)
    for role, argv in zip(("agg", "prefill", "decode"), workers, strict=True):
        assert argv[:3] == ["python", "-m", "dynamo.trtllm"]
        assert argv[argv.index("--model") + 1] == str(out / HF_DIR)
        assert argv[argv.index("--extra-engine-args") + 1] == str(out / OPTIONS_FILE)
        assert argv[argv.index("--disaggregation-mode") + 1] == role
        assert argv[argv.index("--kv-block-size") + 1] == "32"
        if role != "agg":
            overrides = json.loads(argv[argv.index("--override-engine-args") + 1])
            assert overrides["cache_transceiver_config"] == {"backend": "DEFAULT"}


def test_not_an_engine_dir_is_one_sentence(tmp_path):
    result = CliRunner().invoke(main, ["dynamo", str(tmp_path), "--dry-run"])
    assert result.exit_code == 2 and "not an engine dir" in result.output


def test_a_trtllm_engine_dir_is_no_trtserve_prefill_worker(tmp_path, tiny_llama):
    out = tmp_path / "trtllm-engine"
    build_engine(BuildConfig(model=str(tiny_llama), backend="trtllm"), out, quiet=True)
    result = CliRunner().invoke(main, ["dynamo", str(out), "--role", "prefill"])
    assert result.exit_code == 2 and "python -m dynamo.trtllm" in result.output
