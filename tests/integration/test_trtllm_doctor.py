"""`trtserve doctor`: the verdicts for hosts it cannot see here (pure), and the command on this host."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from trtserve.backends.tensorrt_llm.capabilities import planned
from trtserve.backends.tensorrt_llm.host import HostReport, render, verdicts
from trtserve.cli import main

H100 = dict(torch="2.9.0", cuda="12.9", driver="575.57.08", gpu_name="NVIDIA H100", sm="9.0")


def _host(version: str | None, **over) -> HostReport:
    caps = replace(planned(version), version=version, how="installed, introspected") if version else None
    fields = dict(caps=caps, import_error=None, tensorrt="10.11.0", trtllm_build="/usr/bin/trtllm-build", **H100)
    return HostReport(**{**fields, **over})


def _answers(report: HostReport) -> dict[str, tuple[bool, str]]:
    return {v.workflow: (v.ok, v.why) for v in verdicts(report)}


RUN_TRTLLM, BUILD_TRT, RUN_TRT = (
    "run --backend trtllm engine dirs",
    "build --backend tensorrt",
    "run --backend tensorrt engine dirs",
)


def test_a_1_2_host_with_an_h100_can_do_everything():
    answers = _answers(_host("1.2.1"))
    assert all(ok for ok, _ in answers.values())
    assert "TensorRT-LLM 1.2.1, release line 1.2" in answers[BUILD_TRT][1]


def test_main_has_no_tensorrt_workflow():
    answers = _answers(_host("1.4.0rc1", trtllm_build=None))
    assert answers[RUN_TRTLLM][0] and not answers[BUILD_TRT][0] and not answers[RUN_TRT][0]
    assert "has no TensorRT backend" in answers[RUN_TRT][1]


@pytest.mark.parametrize(
    "over, workflow, reason",
    [
        ({"sm": None, "gpu_name": None}, RUN_TRTLLM, "no CUDA GPU is visible (torch.cuda.is_available() is False)"),
        (
            {"sm": None, "gpu_name": None, "cuda": None},
            RUN_TRT,
            "no CUDA GPU is visible (torch was built without CUDA)",
        ),
        ({"sm": "7.5", "gpu_name": "Tesla T4"}, RUN_TRTLLM, "is SM 7.5, older than Ampere (SM 8.0)"),
        (
            {"import_error": "ImportError: libmpi.so.40"},
            RUN_TRTLLM,
            "`import tensorrt_llm` failed (ImportError: libmpi",
        ),
        ({"trtllm_build": None}, BUILD_TRT, "trtllm-build is not on PATH although tensorrt_llm imports"),
    ],
)
def test_why_not(over, workflow, reason):
    ok, why = _answers(_host("1.2.1", **over))[workflow]
    assert not ok and reason in why


def test_without_tensorrt_llm_it_says_so():
    report = _host(None, **{k: None for k in ("tensorrt", "cuda", "driver", "gpu_name", "sm", "trtllm_build")})
    answers = _answers(report)
    assert [ok for ok, _ in answers.values()] == [True, True, False, False, False, True]
    assert answers[RUN_TRTLLM][1].startswith("TensorRT-LLM is not installed; install it with `pip install")
    assert "summary: TensorRT-LLM is not installed here, so nothing runs on TensorRT-LLM" in render(
        report, verdicts(report)
    )


def test_doctor_on_this_host():
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("host:\n  TensorRT-LLM ") and "workflows:" in result.output
    assert "build --backend trtllm" in result.output and "summary: " in result.output
    data = json.loads(CliRunner().invoke(main, ["doctor", "--json"]).output)
    assert [w["workflow"] for w in data["workflows"]][0] == "build --backend torch, run torch engine dirs"
    assert set(data["host"]) >= {"caps", "tensorrt", "cuda", "driver", "gpu_name", "sm", "import_error"}
