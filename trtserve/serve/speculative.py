"""Per-request speculative-decoding figures, for a client that asks for them (`return_spec_decode_stats`).

The engine reports each sequence's counts on its deltas (TokenDelta.spec); a response sums its
sequences' and adds vLLM's two derived figures: acceptance rate = accepted / draft tokens, and
mean acceptance length = 1 + accepted / drafts (tokens each verification pass yielded).
"""

from __future__ import annotations

from collections.abc import Iterable

from trtserve.engine.stats import SpecCounts


def total(counts: Iterable[SpecCounts | None]) -> SpecCounts:
    """The sum of several sequences' counts (None: a sequence that never speculated)."""
    out = SpecCounts()
    for c in counts:
        if c is None:
            continue
        out.drafts += c.drafts
        out.draft_tokens += c.draft_tokens
        out.accepted_tokens += c.accepted_tokens
        width = max(len(out.accepted_per_position), len(c.accepted_per_position))
        out.accepted_per_position = [
            _at(out.accepted_per_position, i) + _at(c.accepted_per_position, i) for i in range(width)
        ]
    return out


def _at(values: list[int], i: int) -> int:
    return values[i] if i < len(values) else 0


def stats_field(counts: Iterable[SpecCounts | None]) -> dict:
    """The `spec_decode` object of a response: summed counts and the derived figures (null: no drafts)."""
    c = total(counts)
    return {
        "num_drafts": c.drafts,
        "num_draft_tokens": c.draft_tokens,
        "num_accepted_tokens": c.accepted_tokens,
        "num_accepted_tokens_per_pos": list(c.accepted_per_position),
        "acceptance_rate": c.accepted_tokens / c.draft_tokens if c.draft_tokens else None,
        "mean_acceptance_length": 1 + c.accepted_tokens / c.drafts if c.drafts else None,
    }
