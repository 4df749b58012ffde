"""TensorRT-LLM's speculative-decoding acceptance -> our SpecCounts (per request and engine totals).

Two places carry it on the PyTorch backend (which release fills which: capabilities.RELEASES):

    iteration stats   `specDecodingStats` {numDraftTokens, numAcceptedTokens, numRequestsWithDraftTokens,
                      acceptanceLength, iterLatencyMS, draftOverhead} (C++ SpecDecodingStats, camelCase
                      as IterationStats.to_json_str writes it); PyExecutor._update_iter_stats sums the
                      iteration's generation requests that carried drafts. Summed over every iteration
                      they are our engine totals: drafts = numRequestsWithDraftTokens (one verification
                      pass per such request), draft_tokens, accepted_tokens.
    per request       CompletionOutput.request_perf_metrics.speculative_decoding {total_draft_tokens,
                      total_accepted_draft_tokens, acceptance_rate} with SamplingParams(return_perf_metrics=True):
                      running totals of the request. Its verification passes are not given, so drafts
                      stays 0 (no acceptance length per request).
Neither has per-position counts, so accepted_per_position stays empty.
"""

from __future__ import annotations

import logging
import threading

from trtserve.backends.tensorrt_llm.capabilities import Capabilities
from trtserve.engine.stats import SpecCounts

log = logging.getLogger(__name__)
ITERATION_KEY = "specDecodingStats"
PERF_METRICS_FLAG = "return_perf_metrics"  # the SamplingParams field that asks for request_perf_metrics


def iteration_counts(iteration: dict) -> SpecCounts | None:
    """One iteration's acceptance; None where it carries none (no drafts, or a release without them)."""
    spec = iteration.get(ITERATION_KEY) or {}
    draft_tokens = int(spec.get("numDraftTokens", 0) or 0)
    if draft_tokens <= 0:
        return None
    return SpecCounts(
        drafts=int(spec.get("numRequestsWithDraftTokens", 0) or 0),
        draft_tokens=draft_tokens,
        accepted_tokens=int(spec.get("numAcceptedTokens", 0) or 0),
    )


def request_counts(seq) -> SpecCounts | None:
    """A sequence's acceptance so far from its perf metrics; None where it has not drafted (or none came)."""
    metrics = getattr(seq, "request_perf_metrics", None)
    spec = getattr(metrics, "speculative_decoding", None)
    draft_tokens = int(getattr(spec, "total_draft_tokens", 0) or 0)
    if draft_tokens <= 0:
        return None
    return SpecCounts(draft_tokens=draft_tokens, accepted_tokens=int(spec.total_accepted_draft_tokens))


class SpecTotals:
    """The engine's running totals: every iteration's acceptance, added as the stats poller sees it
    (on its thread) and read by stats() (on the server's), so both hold the lock."""

    def __init__(self):
        self._counts = SpecCounts()
        self._lock = threading.Lock()

    def add(self, iterations: list[dict]) -> None:
        for it in iterations:
            c = iteration_counts(it)
            if c is not None:
                with self._lock:
                    self._counts.drafts += c.drafts
                    self._counts.draft_tokens += c.draft_tokens
                    self._counts.accepted_tokens += c.accepted_tokens

    def snapshot(self) -> SpecCounts:
        with self._lock:
            c = self._counts
            return SpecCounts(drafts=c.drafts, draft_tokens=c.draft_tokens, accepted_tokens=c.accepted_tokens)


def log_what_is_reported(caps: Capabilities) -> None:
    """Say once, at start, what acceptance this release reports while it speculates."""
    if not caps.spec_iteration_stats and not caps.spec_request_metrics:
        log.warning(
            "%s reports no speculative-decoding acceptance on the PyTorch backend: the "
            "trtserve_spec_decode_* counters stay 0 and responses carry no acceptance counts",
            caps.label,
        )
    elif not caps.spec_request_metrics:
        log.info(
            "%s reports speculative-decoding acceptance per iteration only: engine totals are counted, "
            "responses carry no per-request acceptance counts",
            caps.label,
        )
