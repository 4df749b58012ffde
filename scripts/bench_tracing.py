"""What tracing costs (docs/observability.md, "Overhead"), two ways:

python scripts/bench_tracing.py [--requests 5000]
    CPU per request: a request's server span, its generation span and the four child spans built from
    its timings, with tracing off (the null span) and on (the SDK, a batch span processor over an
    exporter that keeps nothing), timed over many requests in one process. No server or model.

python scripts/bench_tracing.py --mixed ENGINE_DIR [--num-requests 32] [--input-len 32:512]
        [--output-len 16:256] [--concurrency 32] [--kv-cache-memory 2GiB]
    Throughput: compare.py's mixed workload through `trtserve run`, once with tracing off and once on
    (OTEL_TRACES_SAMPLER=always_on, exporting over OTLP/gRPC to a receiver started here that counts
    and drops the spans), one run each; prints output tokens/s of both and their ratio.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from compare import _length  # the same N or LO:HI lengths as compare.py's mixed workload
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


def cpu_per_request(n: int) -> None:
    on = OtelTracing(processor=BatchSpanProcessor(Drop()))
    _per_request(on, 200)  # warm-up
    off_s, on_s = _per_request(NO_TRACING, n), _per_request(on, n)
    on.shutdown()
    print(f"off: {off_s * 1e6:.1f} us CPU per request; on: {on_s * 1e6:.1f} us CPU per request (6 spans)")


def _receiver():
    """An OTLP/gRPC receiver on a free port that counts the spans it is sent: (server, counter)."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    class Count(trace_service_pb2_grpc.TraceServiceServicer):
        spans = 0

        def Export(self, request, context):
            Count.spans += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Count(), server)
    server.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, Count


def mixed(args) -> None:
    from peers import trtserve_peer  # scripts/peers: compare.py's server driver

    from trtserve.bench.stats import summarize
    from trtserve.bench.workload import random_requests
    from trtserve.engine.layout import read_engine_config

    engine = Path(args.mixed)
    vocab = read_engine_config(engine).pretrained_config.vocab_size
    requests = random_requests(args.num_requests, args.input_len, args.output_len, vocab, args.seed)
    runs = [dict(name="mixed", requests=requests, max_concurrency=args.concurrency, request_rate=float("inf"))]
    server, count = _receiver()
    log = Path(args.out)
    log.mkdir(parents=True, exist_ok=True)
    settings = dict(prefix_caching=True, kv_cache_memory=args.kv_cache_memory, seed=args.seed)
    try:
        off = trtserve_peer.serve_and_run(engine, runs, log=log / "tracing-off.log", **settings)["mixed"]
        on = trtserve_peer.serve_and_run(
            engine,
            runs,
            log=log / "tracing-on.log",
            serve_options={"otlp_traces_endpoint": f"http://127.0.0.1:{server.port}"},
            env={"OTEL_TRACES_SAMPLER": "always_on", "OTEL_SERVICE_NAME": "bench-tracing"},
            **settings,
        )["mixed"]
    finally:
        server.stop(grace=1)
    tps = {name: summarize(run)["output_throughput"] for name, run in (("off", off), ("on", on))}
    print(f"mixed workload, {args.num_requests} requests at concurrency {args.concurrency}, one run each")
    print(
        f"tracing off: {tps['off']:.1f} output tok/s; on (sampler 1.0, {count.spans} spans exported): {tps['on']:.1f}"
    )
    print(f"throughput on/off: {tps['on'] / tps['off']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=5000, help="CPU-per-request mode: requests timed [5000]")
    ap.add_argument("--mixed", metavar="ENGINE_DIR", help="throughput mode: serve this engine dir")
    ap.add_argument("--num-requests", type=int, default=32)
    ap.add_argument("--input-len", type=_length, default=(32, 512), help="N or LO:HI [32:512]")
    ap.add_argument("--output-len", type=_length, default=(16, 256), help="N or LO:HI [16:256]")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--kv-cache-memory", default="2GiB")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bench-results/tracing", help="where the two servers' logs go")
    args = ap.parse_args()
    if args.mixed:
        mixed(args)
    else:
        cpu_per_request(args.requests)


if __name__ == "__main__":
    main()
