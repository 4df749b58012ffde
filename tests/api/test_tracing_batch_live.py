"""A batch job's trace on a live server (docs/observability.md): one span for the job's run, a child span per
line named by its custom_id, and each line's generation (with its admission / queue / prefill / decode
spans) under its line, sent to an OTLP/gRPC receiver started here."""

from __future__ import annotations

import json
import time

import openai
import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")

from conftest import Server  # noqa: E402
from otlp_receiver import INTERNAL, Receiver, attrs  # noqa: E402

pytestmark = pytest.mark.timeout(300)
LINES = 3


def _jsonl() -> bytes:
    rows = [
        {
            "custom_id": f"line-{i}",
            "method": "POST",
            "url": "/v1/completions",
            "body": {"prompt": "the quick brown fox " * (i + 1), "max_tokens": 3, "temperature": 0, "ignore_eos": True},
        }
        for i in range(LINES)
    ]
    return "\n".join(json.dumps(r) for r in rows).encode() + b"\n"


def test_batch_job_span_holds_one_span_per_line(tiny_llama_engine, tmp_path):
    env = {"OTEL_SERVICE_NAME": "trtserve-batch", "OTEL_BSP_SCHEDULE_DELAY": "50"}
    with Receiver() as receiver:
        args = ("--kv-cache-memory", "64MiB", "--state-dir", str(tmp_path / "state"))
        server = Server(
            tiny_llama_engine, *args, "--otlp-traces-endpoint", receiver.endpoint, env=env, log=tmp_path / "s.log"
        )
        try:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=30)
            f = client.files.create(file=("in.jsonl", _jsonl()), purpose="batch")
            batch = client.batches.create(input_file_id=f.id, endpoint="/v1/completions", completion_window="24h")
            deadline = time.time() + 120
            while client.batches.retrieve(batch.id).status != "completed":
                assert time.time() < deadline, "the batch did not complete"
                time.sleep(0.1)
            job_name = f"batch {batch.id}"
            (job,) = receiver.wait(lambda s: s.name == job_name, {job_name})[job_name]
            lines = {f"batch line line-{i}" for i in range(LINES)}
            want = {job_name: 1, **dict.fromkeys(lines, 1), "text_completion " + tiny_llama_engine.name: LINES}
            spans = receiver.trace(job.trace_id.hex(), want)
        finally:
            server.stop()
    assert job.kind == INTERNAL and not job.parent_span_id  # the root of its own trace
    a = attrs(job)
    assert a["trtserve.batch_id"] == batch.id and a["trtserve.batch.lines"] == LINES
    assert a["trtserve.status"] == "completed"
    gens = spans["text_completion " + tiny_llama_engine.name]
    assert len(gens) == LINES
    line_ids = set()
    for i in range(LINES):
        (line,) = spans[f"batch line line-{i}"]
        assert line.parent_span_id == job.span_id and line.kind == INTERNAL
        assert attrs(line)["http.response.status_code"] == 200 and attrs(line)["trtserve.batch.line"] == i + 1
        assert job.start_time_unix_nano <= line.start_time_unix_nano <= line.end_time_unix_nano
        assert line.end_time_unix_nano <= job.end_time_unix_nano
        line_ids.add(line.span_id)
    assert {g.parent_span_id for g in gens} == line_ids  # each generation under its own line
    for name in ("admission", "queue", "prefill", "decode"):
        assert {s.parent_span_id for s in spans[name]} == {g.span_id for g in gens}
