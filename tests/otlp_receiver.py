"""An OTLP/gRPC trace receiver for tests (opentelemetry-proto's TraceService): keeps every span it is
sent, and finds a trace's spans by name once they have all arrived."""

from __future__ import annotations

import queue
import time
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

SERVER, INTERNAL = 2, 1  # opentelemetry.proto.trace.v1.Span.SpanKind


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """`with Receiver() as r:` listens on r.endpoint until the block ends."""

    def __init__(self):
        self.spans: queue.Queue = queue.Queue()
        self.seen: list = []  # (service name, span) received so far
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Receiver:
        self.server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop(grace=None)

    def Export(self, request, context):
        for rs in request.resource_spans:
            service = {a.key: a.value.string_value for a in rs.resource.attributes}.get("service.name")
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.put((service, s))
        return trace_service_pb2.ExportTraceServiceResponse()

    def wait(self, match, want: set[str] | dict[str, int], timeout: float = 20) -> dict[str, list]:
        """name -> spans for which `match(span)` holds, once every name in `want` has arrived (as many spans
        of it as a dict `want` says: processes export on their own schedules)."""
        want = want if isinstance(want, dict) else dict.fromkeys(want, 1)
        deadline = time.time() + timeout
        while True:
            while not self.spans.empty():
                self.seen.append(self.spans.get())
            found: dict[str, list] = {}
            for _, s in self.seen:
                if match(s):
                    found.setdefault(s.name, []).append(s)
            if all(len(found.get(name, ())) >= n for name, n in want.items()):
                return found
            if time.time() > deadline:
                seen = sorted({(s.name, s.trace_id.hex()) for _, s in self.seen})
                raise AssertionError(f"spans {sorted(found)} arrived, not all of {sorted(want)}; received: {seen}")
            time.sleep(0.05)

    def trace(self, trace_id: str, want: set[str] | dict[str, int], timeout: float = 20) -> dict[str, list]:
        return self.wait(lambda s: s.trace_id.hex() == trace_id, want, timeout)


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    return getattr(v, kind)


def attrs(span) -> dict:
    return {a.key: value(a.value) for a in span.attributes}
