"""`trtserve check` without a model: the config schema and its did-you-mean messages, usage errors
(exit 2), targets, the lock diff, and the JUnit / JSON writers."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from trtserve.check import report
from trtserve.check.lock import diff
from trtserve.check.result import CheckResult, ConfigReport, Status
from trtserve.check.runner import Options, run_checks
from trtserve.check.settings import CHECKS
from trtserve.check.targets import TARGETS, resolve_target
from trtserve.cli import main

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, data: dict | str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def check(*args: str):
    return CliRunner().invoke(main, ["check", *map(str, args)])


def schema_of(tmp_path, data: dict) -> CheckResult:
    (rep,) = run_checks([write(tmp_path, data)], Options())
    return rep.results[0]


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"model": "m", "max_seq_length": 8}, "unknown key 'max_seq_length'; did you mean 'max_seq_len'?"),
        ({"model": "m", "checks": {"skp": ["smoke"]}}, "unknown key 'checks.skp'; did you mean 'skip'?"),
        ({"checks": {"expect": {"top1_agreemnt": 0.9}}}, "did you mean 'top1_agreement'?"),
        (
            {"dtype": "bfloat"},
            "'dtype': 'bfloat' is not one of auto, bfloat16, float16, float32; did you mean 'bfloat16'?",
        ),
        ({"quant": "w8a61"}, "did you mean 'w8a16'?"),
        ({"backend": "tensorrtllm"}, "did you mean 'tensorrt'?"),
        ({"target": "h100-80g"}, "did you mean 'h100-80gb'?"),
        ({"checks": {"skip": ["smok"]}}, "did you mean 'smoke'?"),
        ({"tp_size": 0}, "'tp_size': Input should be greater than or equal to 1"),
        ({"checks": {"expect": {"top1_agreement": 0.9}}}, "compare with a reference; add `reference:`"),
    ],
)
def test_schema_names_the_problem_and_the_nearest_key(tmp_path, data, words):
    result = schema_of(tmp_path, data)
    assert result.status is Status.FAIL
    assert words in result.message


def test_a_config_that_does_not_validate_fails_schema_and_skips_the_rest(tmp_path):
    path = write(tmp_path, {"model": "m", "max_seq_length": 8})
    (rep,) = run_checks([path], Options(level="smoke"))
    assert [r.name for r in rep.results] == list(CHECKS)
    assert all(r.status is Status.SKIP and "does not validate" in r.message for r in rep.results[1:])
    out = check(path, "--level", "smoke", "--json", tmp_path / "r.json")
    assert out.exit_code == 1, out.output
    assert "FAILED: 1 configs, 7 checks: 0 passed, 1 failed, 6 skipped" in out.output
    schema = json.loads((tmp_path / "r.json").read_text())["configs"][0]["checks"][0]
    assert schema["status"] == "fail" and "did you mean 'max_seq_len'" in schema["message"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["missing.yaml"], "cannot read config file"),
        (["bad.yaml"], "is not valid YAML"),
        (["list.yaml"], "must hold a mapping"),
        (["ok.yaml", "--target", "h100"], "did you mean 'h100-80gb'?"),
        (["ok.yaml", "ok.yaml", "--lock", "x.lock"], "--lock names the lock of one config"),
        (["ok.yaml", "--level", "quick"], "'quick' is not one of"),
        (["ok.yaml", "--junit", "no/such/dir/r.xml"], "its directory does not exist"),
    ],
)
def test_usage_errors_exit_2_with_one_sentence(tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "model: [unclosed", "bad.yaml")
    write(tmp_path, "- a\n- b\n", "list.yaml")
    write(tmp_path, {"model": "m"}, "ok.yaml")
    out = check(*args)
    assert out.exit_code == 2, out.output
    assert words in out.output
    assert "Traceback" not in out.output


def test_targets_are_presets_or_sizes():
    assert {"h100-80gb", "h200-141gb", "l4-24gb", "a10g-24gb", "cpu-32gb"} <= TARGETS.keys()
    h100 = resolve_target("h100-80gb")
    assert h100.device == "cuda" and h100.usable == int(0.9 * 81559 * 2**20)
    size = resolve_target("24GiB")
    assert (size.memory, size.usable, size.device) == (24 * 2**30, 24 * 2**30, None)
    assert resolve_target(1000).memory == 1000
    with pytest.raises(ValueError, match="did you mean 'l4-24gb'"):
        resolve_target("l4-24g")


def test_lock_diff_is_one_line_per_leaf():
    was = {"toolchain": {"torch": "2.13.0", "python": "3.11.7"}, "files": {"a": "1" * 64, "gone": "x"}}
    now = {"toolchain": {"torch": "2.14.0", "python": "3.11.7"}, "files": {"a": "2" * 64, "new": "y"}}
    assert diff(was, now) == [
        f"files.a: {'1' * 12}... (lock) -> {'2' * 12}... (now)",
        "files.gone: x (lock) -> absent (now)",
        "files.new: absent (lock) -> y (now)",
        "toolchain.torch: 2.13.0 (lock) -> 2.14.0 (now)",
    ]


def _reports() -> list[ConfigReport]:
    ok = ConfigReport("configs/a.yaml", "l4-24gb")
    ok.results = [CheckResult(n, Status.PASS, f"{n} ok", 0.5) for n in CHECKS[:4]]
    ok.results.append(CheckResult("smoke", Status.SKIP, "runs at --level smoke"))
    bad = ConfigReport("configs/b.yaml", None)
    bad.results = [
        CheckResult("schema", Status.PASS, "fine", 0.1),
        CheckResult("lock", Status.FAIL, "1 difference: toolchain.torch", 0.2, "toolchain.torch: a -> b"),
    ]
    return [ok, bad]


def test_junit_counts_testcases_failures_and_skips(tmp_path):
    path = tmp_path / "r.xml"
    report.write_junit(_reports(), "smoke", path)
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("skipped"), root.get("errors")) == ("7", "1", "1", "0")
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["configs/a.yaml", "configs/b.yaml"]
    cases = root.findall(".//testcase")
    assert len(cases) == 7 and all(c.get("classname").startswith("trtserve.check.") for c in cases)
    (failure,) = root.findall(".//failure")
    assert failure.get("message").startswith("1 difference:") and failure.text == "toolchain.torch: a -> b"
    assert len(root.findall(".//skipped")) == 1
    assert suites[1].get("tests") == "2" and suites[1].get("failures") == "1"


def test_json_report(tmp_path):
    path = tmp_path / "r.json"
    report.write_json(_reports(), "plan", path)
    data = json.loads(path.read_text())
    assert data["ok"] is False and data["level"] == "plan"
    assert data["summary"] == {"configs": 2, "checks": 7, "passed": 5, "failed": 1, "skipped": 1}
    assert data["configs"][1]["checks"][1]["detail"] == "toolchain.torch: a -> b"


def test_the_example_workflow_runs_the_check():
    flow = yaml.safe_load((ROOT / "examples/ci/trtserve-check.yml").read_text())
    steps = flow["jobs"]["check"]["steps"]
    runs = " ".join(s.get("run", "") for s in steps)
    assert "trtserve check configs/*.yaml" in runs and "--junit report.xml" in runs
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("actions/cache") for u in uses) and any(
        u.startswith("actions/upload-artifact") for u in uses
    )
    assert "trtserve check configs/ci/*.yaml --level smoke" in (ROOT / ".ci/run").read_text()


def test_the_ci_configs_validate():
    from trtserve.check.settings import validate

    paths = sorted((ROOT / "configs/ci").glob("*.yaml"))
    assert len(paths) >= 3
    for path in paths:
        cfg, problems = validate(yaml.safe_load(path.read_text()))
        assert not problems, f"{path.name}: {problems}"
