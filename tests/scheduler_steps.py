"""Driving a Scheduler without a model, for the scheduler tests."""

from __future__ import annotations

from trtserve.runtime.scheduler import Scheduler


def run_step(s: Scheduler):
    """Schedule, then pretend the model ran: advance computed tokens, sample token 7 when a chunk completes."""
    out = s.schedule()
    s.update(out)
    for c in out.chunks:
        r = c.request
        if r.num_computed_tokens == r.num_tokens:
            r.output_token_ids.append(7)
            if len(r.output_token_ids) >= r.params.max_tokens:
                s.finish(r, "length")
    return out
