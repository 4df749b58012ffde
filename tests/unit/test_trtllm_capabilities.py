"""The TensorRT-LLM capability table: release lines, planning a release that is not installed, reading
an installed one from its metadata or by introspection, and the decisions taken from it."""

from __future__ import annotations

import sys
from dataclasses import replace
from types import ModuleType, SimpleNamespace

import pytest

from trtserve.backends.tensorrt_llm import capabilities as cap
from trtserve.backends.tensorrt_llm.compat import workflow_problem
from trtserve.backends.tensorrt_llm.serve_plan import fit_options, serve_backend
from trtserve.engine.errors import UserError


@pytest.mark.parametrize(
    "version, line",
    [("1.0.0", "1.0"), ("1.0.0rc4", "1.0"), ("1.1.0", "1.1"), ("1.2.1", "1.2"), ("1.3.0rc5", "main")]
    + [("1.3.0rc22", "main"), ("1.4.0rc1", "main"), ("main", "main"), ("1.2", "1.2")],
)
def test_release_lines(version, line):
    assert cap.release_line(version) == line


@pytest.mark.parametrize(
    "version, message",
    [
        ("0.19.0", "TensorRT-LLM 0.19.0 is older than 1.0, the first release trtserve supports"),
        ("banana", "'banana' is not a TensorRT-LLM version; give a release as X.Y (1.0, 1.1, 1.2) or main"),
    ],
)
def test_bad_versions_are_one_sentence(version, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cap.planned(version)


def test_planned_releases():
    v10, v12, main = cap.planned("1.0"), cap.planned("1.2"), cap.planned("main")
    assert (v10.tensorrt_engine, v12.tensorrt_engine, main.tensorrt_engine) == (True, True, False)
    assert cap.SAMPLER_SWITCH in v10.torch_args and cap.SAMPLER_SWITCH not in v12.torch_args
    assert [serve_backend(c, "tensorrt") for c in (v10, v12)] == ["trt", "tensorrt"]
    assert {serve_backend(c, "trtllm") for c in (v10, v12, main)} == {"pytorch"}
    with pytest.raises(UserError, match="has no TensorRT backend"):
        serve_backend(main, "tensorrt")
    assert "--trtllm-version 1.0" in v10.label and v10.version is None


def test_workflows_follow_what_is_there_not_the_version():
    main = cap.planned("main")
    assert "has no TensorRT backend" in workflow_problem(main, "tensorrt", build=False)
    rc_with_trt = replace(main, version="1.3.0rc5", tensorrt_engine=True, trtllm_build=True)
    assert workflow_problem(rc_with_trt, "tensorrt", build=True) is None
    runs_only = replace(rc_with_trt, trtllm_build=False)
    assert workflow_problem(runs_only, "tensorrt", build=False) is None
    assert "has no trtllm-build" in workflow_problem(runs_only, "tensorrt", build=True)
    assert workflow_problem(main, "trtllm", build=True) is None


def test_fit_options_moves_the_sampler_switch_between_releases():
    built_for_10 = {"max_batch_size": 8, cap.SAMPLER_SWITCH: True, "kv_cache_config": {}}
    assert fit_options(built_for_10, "trtllm", cap.planned("1.2"), "O") == {"max_batch_size": 8, "kv_cache_config": {}}
    built_for_12 = {"max_batch_size": 8}
    assert fit_options(built_for_12, "trtllm", cap.planned("1.0"), "O") == {
        "max_batch_size": 8,
        cap.SAMPLER_SWITCH: True,
    }
    assert fit_options({"kv_cache_config": {}}, "tensorrt", cap.planned("1.0"), "O") == {"kv_cache_config": {}}


def test_fit_options_refuses_what_the_installed_release_lacks():
    caps = replace(cap.planned("main"), introspected=True)
    with pytest.raises(
        UserError, match=r"^O sets bogus, which TensorRT-LLM .* does not take as an LLM argument; rebuild"
    ):
        fit_options({"bogus": 1, "max_batch_size": 8}, "trtllm", caps, "O")
    fit_options({"bogus": 1}, "trtllm", cap.planned("main"), "O")  # a table's key list is not complete: no refusal


# ---- probing an imported tensorrt_llm --------------------------------------------------------------
def _fake_tllm(monkeypatch, version: str, *, torch_fields: set, trt: bool, serve_choices=None) -> ModuleType:
    """A minimal tensorrt_llm package in sys.modules, with or without the TensorRT backend."""
    pkg = ModuleType("tensorrt_llm")
    pkg.__version__, pkg.__path__ = version, []
    llm_args = ModuleType("tensorrt_llm.llmapi.llm_args")
    llm_args.TorchLlmArgs = SimpleNamespace(model_fields=dict.fromkeys(torch_fields))
    if trt:
        llm_args.TrtLlmArgs = SimpleNamespace(model_fields=dict.fromkeys(cap.TRT_ARGS))
    modules = {"tensorrt_llm": pkg, "tensorrt_llm.llmapi": ModuleType("tensorrt_llm.llmapi")}
    modules["tensorrt_llm.llmapi.llm_args"] = llm_args
    if trt:
        for name in ("tensorrt_llm._tensorrt_engine", "tensorrt_llm.commands", "tensorrt_llm.commands.build"):
            modules[name] = ModuleType(name)
            modules[name].__spec__ = SimpleNamespace(name=name)
    if serve_choices is not None:
        param = SimpleNamespace(name="backend", type=SimpleNamespace(choices=serve_choices, aliases={}))
        serve = ModuleType("tensorrt_llm.commands.serve")
        serve.main = SimpleNamespace(params=[param])
        modules.setdefault("tensorrt_llm.commands", ModuleType("tensorrt_llm.commands"))
        modules["tensorrt_llm.commands.serve"] = serve
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return pkg


def test_probe_reads_fields_modules_and_serve_choices(monkeypatch):
    fields = set(cap.TORCH_ARGS) | {cap.SAMPLER_SWITCH, "some_new_field"}
    tllm = _fake_tllm(monkeypatch, "1.0.0", torch_fields=fields, trt=True, serve_choices=["pytorch", "trt"])
    caps = cap.probe(tllm, serve_cli=True)
    assert (caps.line, caps.version, caps.tensorrt_engine, caps.trtllm_build, caps.introspected) == (
        "1.0",
        "1.0.0",
        True,
        True,
        True,
    )
    assert "some_new_field" in caps.torch_args and caps.serve_backends == ("pytorch", "trt")


def test_probe_of_a_1_3_rc_with_the_tensorrt_backend(monkeypatch):
    tllm = _fake_tllm(monkeypatch, "1.3.0rc5", torch_fields=set(cap.TORCH_ARGS), trt=True)
    caps = cap.probe(tllm)
    assert caps.line == "main" and caps.tensorrt_engine and workflow_problem(caps, "tensorrt", build=True) is None
    assert serve_backend(caps, "tensorrt") == "tensorrt"


def test_probe_of_main(monkeypatch):
    caps = cap.probe(_fake_tllm(monkeypatch, "1.4.0rc1", torch_fields=set(cap.TORCH_ARGS), trt=False))
    assert not caps.tensorrt_engine and not caps.trt_args and "tensorrt" not in caps.serve_backends


# ---- reading the installed distribution without importing it ---------------------------------------
def _dist_info(root, version: str, files: list[str], scripts: list[str]) -> None:
    info = root / f"tensorrt_llm-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tensorrt_llm\nVersion: {version}\n")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    entry_points = "".join(f"{s} = tensorrt_llm.commands.x:main\n" for s in scripts)
    (info / "entry_points.txt").write_text("[console_scripts]\n" + entry_points)


def test_installed_from_metadata(tmp_path, monkeypatch):
    files = ["tensorrt_llm/__init__.py", "tensorrt_llm/_tensorrt_engine/__init__.py"]
    _dist_info(tmp_path, "1.3.0rc5", files, ["trtllm-build", "trtllm-serve"])
    monkeypatch.syspath_prepend(str(tmp_path))
    caps = cap.installed()
    assert (caps.version, caps.line, caps.tensorrt_engine, caps.trtllm_build) == ("1.3.0rc5", "main", True, True)
    assert cap.for_planning(None) == caps and cap.for_planning("1.0").line == "1.0"


def test_installed_main_has_no_tensorrt_backend(tmp_path, monkeypatch):
    _dist_info(tmp_path, "1.4.0rc1", ["tensorrt_llm/__init__.py"], ["trtllm-serve"])
    monkeypatch.syspath_prepend(str(tmp_path))
    caps = cap.installed()
    assert (caps.tensorrt_engine, caps.trtllm_build) == (False, False)


def test_nothing_installed_plans_for_the_default_line():
    if cap.installed() is not None:
        pytest.skip("TensorRT-LLM is installed here")
    caps = cap.for_planning(None)
    assert caps.line == cap.DEFAULT_LINE and "not installed" in caps.label
