"""Traces across Dynamo workers (docs/observability.md, "Across processes"): a disaggregated request sent to
Dynamo's frontend with a W3C `traceparent` gives one span on the prefill worker and one on the decode
worker in the caller's trace, both under the frontend's request span (each below Dynamo's own span for
its worker), with role, token counts and (decode) the KV it pulled; Dynamo traces too
(OTEL_EXPORT_ENABLED), and everything goes to an OTLP/gRPC receiver started here."""

import json
import urllib.request

import pytest
from dynamo_cluster import HTTP_TIMEOUT_S, MODEL, Cluster
from helpers import random_prompts

pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")

from otlp_receiver import SERVER, Receiver, attrs  # noqa: E402

TRACE, PARENT = "5bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7"


@pytest.fixture(scope="module")
def traced(tmp_path_factory, tiny_llama_engine):
    mp = pytest.MonkeyPatch()
    with Receiver() as receiver:
        # Dynamo carries the trace context to its workers only while it traces itself (OTEL_EXPORT_ENABLED)
        otel = {"OTEL_EXPORT_ENABLED": "true", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint}
        for k, v in (otel | {"OTEL_BSP_SCHEDULE_DELAY": "50"}).items():
            mp.setenv(k, v)  # the frontend's environment too (Cluster starts it with os.environ)
        c = Cluster(tmp_path_factory.mktemp("dynamo-trace"), tiny_llama_engine)
        try:
            c.add_worker("prefill", "prefill")
            c.add_worker("decode", "decode")
            c.ready(routed=True)  # a probe without the test's trace context: its spans are another trace's
            yield c, receiver
        finally:
            c.stop()
            mp.undo()


def _top(spans: dict, span):
    """The highest ancestor of `span` in its trace as received (the frontend's request span)."""
    by_id = {s.span_id: s for group in spans.values() for s in group}
    while span.parent_span_id in by_id:
        span = by_id[span.parent_span_id]
    return span


def test_prefill_and_decode_are_sibling_spans_under_the_callers(traced):
    cluster, receiver = traced
    prompt = random_prompts(1, seed=21, lo=40, hi=41)[0]
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": True}
    headers = {"Content-Type": "application/json", "traceparent": f"00-{TRACE}-{PARENT}-01"}
    req = urllib.request.Request(cluster.frontend.url + "/v1/completions", json.dumps(body).encode(), headers)
    with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as r:
        assert r.status == 200
    spans = receiver.trace(TRACE, {f"prefill {MODEL}", f"decode {MODEL}"})
    (prefill,) = spans[f"prefill {MODEL}"]
    (decode,) = spans[f"decode {MODEL}"]
    assert prefill.kind == decode.kind == SERVER
    # Each is under Dynamo's span for its worker's part; both parts under the frontend's one request span,
    # whose parent is the caller's.
    top_p, top_d = _top(spans, prefill), _top(spans, decode)
    assert top_p.span_id == top_d.span_id and top_p.parent_span_id.hex() == PARENT
    assert prefill.parent_span_id != decode.parent_span_id
    p, d = attrs(prefill), attrs(decode)
    assert (p["trtserve.dynamo.role"], d["trtserve.dynamo.role"]) == ("prefill", "decode")
    assert p["gen_ai.usage.input_tokens"] == d["gen_ai.usage.input_tokens"] == len(prompt)
    assert p["gen_ai.usage.output_tokens"] == 1 and d["gen_ai.usage.output_tokens"] == 6
    assert d["trtserve.kv_pulled_tokens"] == len(prompt) and d["gen_ai.response.finish_reasons"] == ["length"]
    assert prefill.start_time_unix_nano <= prefill.end_time_unix_nano <= decode.end_time_unix_nano
