"""Verification: which proposals the target model keeps, and the token it adds after them.

Position i's logits score the token after the sequence plus the first i proposals; each position
gets the request's own processing (penalties, bias, masks, grammar) as if those proposals were
already output, so a kept token is exactly what plain decoding would have produced:
- greedy: keep proposals while each equals the target's argmax; then emit the argmax itself;
- sampled (speculative sampling, q a point mass): keep proposal x with probability p(x); on a
  rejection draw from p with x removed (renormalised); after k kept, draw the next token from p.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from trtserve.engine.sampling import TokenLogprob
from trtserve.runtime.sampler import SampleRow, distribution, logprobs_of, processed


@dataclass
class Verdict:
    tokens: list[int]  # the tokens to emit: the kept proposals, then the target's own (unless it ended)
    logprobs: list[TokenLogprob | None]  # one per token
    accepted: int  # proposals kept


def verify(logits: torch.Tensor, draft: list[int], row_at: Callable[[list[int]], SampleRow]) -> Verdict:
    """logits: (1 + len(draft), vocab) float32. row_at(kept): the request's SampleRow as if the proposals
    `kept` followed its output (its grammar matcher, if any, already standing after them)."""
    tokens: list[int] = []
    lps: list[TokenLogprob | None] = []
    for i in range(len(draft) + 1):
        row = row_at(tokens)
        scores = processed(logits[i : i + 1], [row])  # (1, vocab)
        proposal = draft[i] if i < len(draft) else None
        token = _pick(scores, row, proposal)
        want = row.params.logprobs
        lps.append(logprobs_of(torch.log_softmax(scores[0], -1), token, want or 0) if want is not None else None)
        tokens.append(token)
        if token != proposal:
            return Verdict(tokens, lps, i)
        if row.guided is not None and (not row.guided.accept(token) or row.guided.is_terminated):
            return Verdict(tokens, lps, i + 1)  # the grammar is complete: nothing may follow
    raise AssertionError("unreachable: the last position has no proposal")


def _pick(scores: torch.Tensor, row: SampleRow, proposal: int | None) -> int:
    """The token kept at one position: the proposal, or the target's own."""
    if row.params.greedy:
        return int(scores[0].max(dim=-1).indices)  # argmax's index, faster (sampler.sample)
    p = distribution(scores, [row])[0]  # (vocab,) not normalised
    p = p / p.sum()
    if proposal is not None:
        if float(torch.rand((), generator=row.generator)) < float(p[proposal]):
            return proposal
        p = p.clone()
        p[proposal] = 0.0  # max(0, p - q) with q the point mass at the proposal
        if float(p.sum()) <= 0.0:  # p was the point mass itself: the proposal cannot be rejected
            return proposal
    return int(torch.multinomial(p, 1, generator=row.generator))
