"""The CPU cost of tracing per request (docs/tracing.md, "Overhead"): a request's server span, its
generation span and the four child spans built from its timings, with tracing off (the null span) and on
(the SDK, a batch span processor over an exporter that keeps nothing), timed over many requests in one
process. No server or model: this is the work tracing adds to a request, not a throughput run.

    python scripts/bench_tracing.py [--requests 5000]
"""

from __future__ import annotations

import argparse
import time

from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from trtserve.engine.sampling import SamplingParams
from trtserve.serve.telemetry.timings import RunTimings
from trtserve.serve.telemetry.tracing import NO_TRACING
from trtserve.serve.telemetry.tracing_otel import OtelTracing
from trtserve.serve.telemetry.tracing_record import RunRecord


class Drop(SpanExporter):
    def export(self, spans) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _record() -> RunRecord:
    t = time.monotonic()
    timings = RunTimings(t, t + 1e-4, t + 2e-4, 1e-3, t + 0.04, t + 0.4)
    return RunRecord("demo", "1", None, 0.0, "rcpt-1", SamplingParams(max_tokens=64), timings, 20, 64, 0, 0, ["length"])


def _per_request(tracing, n: int) -> float:
    headers = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    attrs = {"http.request.method": "POST", "url.path": "/v1/chat/completions", "trtserve.request_id": "r"}
    start = time.process_time()
    for _ in range(n):
        span = tracing.server_span("POST /v1/chat/completions", headers, attrs, "chat")
        span.run_ended(_record)
        span.response_headers()
        span.end(200, True, "/v1/chat/completions")
    return (time.process_time() - start) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=5000)
    n = ap.parse_args().requests
    on = OtelTracing(processor=BatchSpanProcessor(Drop()))
    _per_request(on, 200)  # warm-up
    off_s, on_s = _per_request(NO_TRACING, n), _per_request(on, n)
    on.shutdown()
    print(f"off: {off_s * 1e6:.1f} us CPU per request; on: {on_s * 1e6:.1f} us CPU per request (6 spans)")


if __name__ == "__main__":
    main()
