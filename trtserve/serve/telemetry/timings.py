"""One generation's timings: the clock readings the generation path takes (`RunTimings`) and the
per-request metrics a client asks for with `"return_metrics": true` (text/outputs.py's RequestMetrics).

The readings are the ones the Prometheus histograms observe for the same run (serve/generation.py):
time to first token and end-to-end from the run's first iteration, the queue time as the engine
reported it. Traces (tracing.py) are built from the same readings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from trtserve.text.outputs import RequestMetrics, RequestOutput


@dataclass(frozen=True, slots=True)
class RunTimings:
    """One generation's clock readings, `time.monotonic()` seconds, as the generation path took them."""

    admitting: float  # GenerationService.start began (hooks, the engine's check, admission)
    admitted: float  # it returned: the run holds a ticket
    started: float  # the run was first iterated: the engine got the request
    queue_time: float | None  # seconds the engine said it waited before first scheduled; None: never scheduled
    first_token: float | None  # the first token arrived; None: none did
    ended: float  # the run ended (finished, failed, or cancelled)

    @property
    def scheduled(self) -> float | None:
        """When the engine first scheduled it (prefill began), on this clock."""
        return None if self.queue_time is None else self.started + self.queue_time


def request_metrics(t: RunTimings, out: RequestOutput) -> RequestMetrics:
    """The run's timings in seconds, vLLM's names. Prefill runs from first scheduling to the first token;
    generation from the first token to the end; the inter-token latency is over the longest sequence."""
    completion = sum(len(o.token_ids) for o in out.outputs)
    longest = max((len(o.token_ids) for o in out.outputs), default=0)
    ttft = None if t.first_token is None else t.first_token - t.started
    prefill = generation = itl = tps = None
    if t.first_token is not None:
        begin = t.scheduled if t.scheduled is not None else t.started
        prefill = max(t.first_token - begin, 0.0)
        generation = t.ended - t.first_token
        if longest > 1:
            itl = generation / (longest - 1)
        if generation > 0:
            tps = (completion - len(out.outputs)) / generation  # tokens after each sequence's first
    return RequestMetrics(
        time_to_first_token=ttft,
        queue_time=t.queue_time,
        prefill_time=prefill,
        generation_time=generation,
        e2e_latency=t.ended - t.started,
        mean_inter_token_latency=itl,
        tokens_per_second=tps,
        prompt_tokens=len(out.prompt_token_ids),
        completion_tokens=completion,
        cached_tokens=out.num_cached_tokens,
    )


def metrics_field(outputs: list[RequestOutput]) -> dict | list[dict] | None:
    """The `metrics` field of a response's usage: its generation's timings (one per prompt, as a list, when
    it had several); None when the client did not ask (`return_metrics`)."""
    found = [asdict(o.metrics) for o in outputs if o.metrics is not None]
    if not found:
        return None
    return found[0] if len(found) == 1 else found
