"""schemathesis over every operation of /openapi.json with all its checks, in process and live: no
5xx, every answer one the schema declares (status, content type, body, Allow on 405), valid cases
accepted and invalid ones refused. Valid cases are kept within the served model's bounds, which the
schema states only in words (fuzz/model_bounds.py)."""

from __future__ import annotations

import os

import pytest
import schemathesis
from fuzz.model_bounds import cap_lengths, within_the_model
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import CHECKS as REGISTRY
from schemathesis.checks import load_all_checks

load_all_checks()
CHECKS = REGISTRY.get_all()  # every check schemathesis has, on every operation
# Cases per operation: ~40 operations make a few hundred in CI; FUZZ_EXAMPLES=200 for the long run.
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "6"))


def aim_at_the_model(case, model: str) -> None:
    """Most generated model names are unknown (a fine 404); send the served one on most cases so
    the request reaches the engine."""
    salt = hash(repr(case.body)) % 4
    if case.path_parameters and "model" in case.path_parameters and salt:
        case.path_parameters["model"] = model
        if "version" in case.path_parameters:
            case.path_parameters["version"] = "1"
    if isinstance(case.body, dict) and isinstance(case.body.get("model"), str) and salt:
        case.body["model"] = model
    # A deadline the client sets may rightly end in 504; the fuzz looks for our 5xx, so none is set.
    for body in (case.body, case.body.get("parameters") if isinstance(case.body, dict) else None):
        if isinstance(body, dict):
            body.pop("timeout", None)
    generates = case.path in ("/v1/completions", "/v1/chat/completions") and isinstance(case.body, dict)
    if generates and "max_tokens" not in case.body and "max_completion_tokens" not in case.body:
        case.body["max_tokens"] = 4  # unset, it is the rest of the context: 256 tokens a case
    # Valid lengths are cut to a few tokens, so that a few hundred cases take seconds, not hours
    # (invalid ones, < 1, stay as they are).
    for body in (case.body, case.body.get("parameters") if isinstance(case.body, dict) else None):
        if isinstance(body, dict):
            cap_lengths(body)
    if case.meta is not None and case.meta.generation.mode.is_positive:
        within_the_model(case.path, case.body)


def describe(err: BaseException) -> str:
    parts = [f"{type(err).__name__}: {str(err)[:1500]}"]
    for sub in getattr(err, "exceptions", ()):
        parts.append("  " + describe(sub).replace("\n", "\n  "))
    return "\n".join(parts)


def _runner(op, model: str, examples: int, sent: list[int]):
    @given(case=op.as_strategy())
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(case):
        aim_at_the_model(case, model)
        sent[0] += 1
        case.call_and_validate(checks=CHECKS, timeout=60)

    return run


# The pooling routes serve pooling models only; on the LLM under test they answer a documented 400
# naming the routes it serves (tests/api/test_pooling_live.py drives them on pooling models).
POOLING = ("/v1/rerank", "/rerank", "/v2/rerank", "/v1/score", "/score", "/classify", "/v1/classify", "/pooling")


def fuzz(schema, model: str, examples: int, skip: tuple[str, ...] = ()) -> tuple[int, dict[str, str]]:
    """Run every operation (but the pooling ones and those under `skip`); returns (cases sent,
    {operation: first failure})."""
    sent, failures = [0], {}
    for result in schema.get_all_operations():
        op = result.ok()
        if op.path.startswith(skip) or op.path in POOLING:
            continue

        try:
            _runner(op, model, examples, sent)()
        except (KeyboardInterrupt, pytest.fail.Exception):
            raise
        except BaseException as err:  # noqa: BLE001 - collected, so that one report names every operation
            failures[op.label] = describe(err)
    return sent[0], failures


@pytest.mark.timeout(300 if EXAMPLES <= 10 else 7200)
def test_every_operation_in_process(fuzz_app, model_name):
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_app)
    sent, failures = fuzz(schema, model_name, EXAMPLES)
    print(f"schemathesis in process: {sent} cases, {len(failures)} operations with failures")
    assert sent >= 100
    assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())


@pytest.mark.timeout(300)
def test_every_operation_against_a_live_server(tiny_llama_engine, tmp_path, model_name):
    from api.conftest import Server

    # A state dir of its own: store and background (valid in the schema) need one, and the default
    # dir may be held by another server (then they are refused).
    state = str(tmp_path / "state")
    server = Server(tiny_llama_engine, "--kv-cache-memory", "16MiB", "--state-dir", state, log=tmp_path / "server.log")
    try:
        schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
        # From 127.0.0.1 the admin routes are open: fuzzing them would unload the model under test (and
        # the LoRA routes answer this engine, started without the `lora` option, 501 Not Implemented).
        admin = ("/admin", "/v2/repository", "/v1/load_lora_adapter", "/v1/unload_lora_adapter")
        sent, failures = fuzz(schema, model_name, max(2, EXAMPLES // 3), skip=admin)
        print(f"schemathesis live: {sent} cases, {len(failures)} operations with failures")
        assert sent >= 40
        assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())
        assert server.proc.poll() is None
    finally:
        server.stop()
