"""Speculative decoding in the fakes: a toy verifier, and the acceptance each release reports of it.

Imitates a speculating request on the PyTorch backend (PyExecutor with a drafter, 1.0 to main): each
generation step (not the context step) may carry up to max_draft_len draft tokens; the target keeps the
longest prefix it agrees with plus one token of its own, so the step emits 1 + accepted tokens, all of
them the target's (lossless). Whether a step drafts and how much of it is kept is a toy rule of the
sequence so far (`proposal`). What comes back, by release (facts.py):

    iteration stats  specDecodingStats {numDraftTokens, numAcceptedTokens, numRequestsWithDraftTokens,
                     acceptanceLength, iterLatencyMS, draftOverhead} on every iteration while a
                     speculative_config is set (PyExecutor._update_iter_stats, PR #9855), where
                     spec_iteration_stats; absent elsewhere
    per request      CompletionOutput.request_perf_metrics (SamplingParams.return_perf_metrics, every
                     release): its speculative_decoding section filled where spec_request_metrics
                     (result.py _maybe_fill_spec_dec_perf_metrics, PR #17082), zero elsewhere
Acceptance is counted before max_tokens / stop truncation, as upstream's samplers count it.
`tallies` (per sequence) and `reported` (every iteration's specDecodingStats) are test hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trtllm_fake_core.facts import ReleaseFacts


def proposal(seq: list[int], max_draft_len: int) -> tuple[int, int]:
    """(draft tokens, accepted) of the step after `seq`: no drafts after a token divisible by 4."""
    if seq[-1] % 4 == 0:
        return 0, 0
    return max_draft_len, (seq[-1] + len(seq)) % (max_draft_len + 1)


@dataclass
class SpeculativeDecodingMetrics:
    """tllm.SpeculativeDecodingMetrics (bindings: RequestPerfMetrics.speculative_decoding)."""

    acceptance_rate: float = 0.0
    total_accepted_draft_tokens: int = 0
    total_draft_tokens: int = 0


@dataclass
class RequestPerfMetrics:
    """tllm.RequestPerfMetrics, as far as the fakes fill it (timing and KV-cache metrics left out)."""

    speculative_decoding: SpeculativeDecodingMetrics = field(default_factory=SpeculativeDecodingMetrics)
    first_iter: int | None = None
    last_iter: int | None = None
    iter: int | None = None


@dataclass
class Tally:
    drafts: int = 0  # steps that carried drafts
    draft_tokens: int = 0
    accepted: int = 0


class Speculation:
    """One LLM's speculative decoding: `verify` per sequence step, `take_iteration` per iteration."""

    def __init__(self, config, facts: ReleaseFacts):
        self.max_draft_len = getattr(config, "max_draft_len", None) or 1
        self.facts = facts
        self.tallies: dict[tuple[int, int], Tally] = {}  # (request id, sequence index) -> its counts
        self.reported: list[dict] = []
        self._iteration = Tally()

    def verify(self, request_id: int, index: int, seq: list[int]) -> int:
        """Draft tokens the target kept in the generation step after `seq` (0: it carried no drafts)."""
        drafted, accepted = proposal(seq, self.max_draft_len)
        if drafted:
            for t in (self.tallies.setdefault((request_id, index), Tally()), self._iteration):
                t.drafts, t.draft_tokens, t.accepted = t.drafts + 1, t.draft_tokens + drafted, t.accepted + accepted
        return accepted

    def take_iteration(self) -> dict | None:
        """This iteration's specDecodingStats (None where the release reports none), then a fresh count."""
        t, self._iteration = self._iteration, Tally()
        if not self.facts.spec_iteration_stats:
            return None
        stats = {
            "numDraftTokens": t.draft_tokens,
            "numAcceptedTokens": t.accepted,
            "numRequestsWithDraftTokens": t.drafts,
            "acceptanceLength": (t.accepted + t.drafts) / t.drafts if t.drafts else 0.0,
            "iterLatencyMS": 0.0,  # one-model drafting: no separate draft latency
            "draftOverhead": 0.0,
        }
        self.reported.append(stats)
        return stats


def perf_metrics(speculation: Speculation | None, request_id: int, index: int, iteration: int) -> RequestPerfMetrics:
    """A sequence's request_perf_metrics as its release returns them: the speculative-decoding section
    is zero without speculation, and on releases that do not fill it."""
    t = speculation.tallies.get((request_id, index), Tally()) if speculation is not None else Tally()
    spec = SpeculativeDecodingMetrics()
    if speculation is not None and speculation.facts.spec_request_metrics and t.draft_tokens:
        spec = SpeculativeDecodingMetrics(t.accepted / t.draft_tokens, t.accepted, t.draft_tokens)
    return RequestPerfMetrics(speculative_decoding=spec, iter=iteration)
