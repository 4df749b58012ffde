"""schemathesis over every operation of /openapi.json, in process: no 5xx, and every answer is one
the schema declares (status, content type, body), for valid and invalid inputs alike."""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
# Routes whose `responses=` other issues own (batch, files, receipts, cache, repository admin): for
# them only "no 5xx" is checked until they document their statuses.
OTHERS = ("/v1/files", "/v1/batches", "/v1/receipts", "/v1/cache", "/v1/replay", "/v2/repository", "/admin")
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
            for key in ("max_tokens", "max_completion_tokens", "min_tokens"):
                if isinstance(body.get(key), int) and not isinstance(body[key], bool) and body[key] > 4:
                    body[key] = 4


def describe(err: BaseException) -> str:
    parts = [f"{type(err).__name__}: {str(err)[:1500]}"]
    for sub in getattr(err, "exceptions", ()):
        parts.append("  " + describe(sub).replace("\n", "\n  "))
    return "\n".join(parts)


def _runner(op, model: str, examples: int, sent: list[int]):
    checks = [not_a_server_error] if op.path.startswith(OTHERS) else CHECKS

    @given(case=op.as_strategy())
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(case):
        aim_at_the_model(case, model)
        sent[0] += 1
        case.call_and_validate(checks=checks, timeout=60)

    return run


def fuzz(schema, model: str, examples: int, skip: tuple[str, ...] = ()) -> tuple[int, dict[str, str]]:
    """Run every operation (but those under `skip`); returns (cases sent, {operation: first failure})."""
    sent, failures = [0], {}
    for result in schema.get_all_operations():
        op = result.ok()
        if op.path.startswith(skip):
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

    server = Server(tiny_llama_engine, "--kv-cache-memory", "16MiB", log=tmp_path / "server.log")
    try:
        schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
        # From 127.0.0.1 the admin routes are open: fuzzing them would unload the model under test.
        sent, failures = fuzz(schema, model_name, max(2, EXAMPLES // 3), skip=("/admin", "/v2/repository"))
        print(f"schemathesis live: {sent} cases, {len(failures)} operations with failures")
        assert sent >= 40
        assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())
        assert server.proc.poll() is None
    finally:
        server.stop()
