"""Token selection for one step: penalties, logit bias, masks, grammar, temperature,
top-k/top-p/min-p, logprobs.

Rows are processed as one batch where the math allows; only the draw itself runs per request,
with the request's own generator, so a seeded request gets the same tokens in any batch.
Order: penalties, logit_bias, min_tokens and bad-word masks, then the grammar's mask (guided.py),
then a forced token (a spent thinking budget, features/thinking.py) over all of them.
Logprobs are those of that final distribution, before temperature: a constrained sequence
reports logprobs after masking (forbidden tokens have -inf and never appear among the top-N).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from trtserve.engine.sampling import SamplingParams, TokenLogprob
from trtserve.kernels import pointwise
from trtserve.runtime.features.thinking import forced_token
from trtserve.runtime.guided import GuidedState, apply_grammar_masks
from trtserve.runtime.request import Request


@dataclass
class SampleRow:
    params: SamplingParams
    prompt_ids: Sequence[int]
    output_ids: Sequence[int]
    generator: torch.Generator | None
    banned_until_min: Sequence[int] = ()  # EOS and stop ids, masked while output < min_tokens
    guided: GuidedState | None = None  # the sequence's grammar matcher, standing after output_ids
    forced: int | None = None  # the only token it may emit next (its thinking budget is spent)


def row_for(r: Request, eos_token_ids, ahead: list[int] | None = None) -> SampleRow:
    """Sequence r's row. ahead: proposals being verified, as if output already (its matcher stands after them)."""
    banned = list(r.params.stop_token_ids) + ([] if r.params.ignore_eos else sorted(eos_token_ids))
    if r.guided is not None and ahead is None:
        r.guided.sync(r.output_token_ids)  # a no-op unless a path dropped or replayed tokens
    output = r.output_token_ids + ahead if ahead else r.output_token_ids
    return SampleRow(r.params, r.prompt_token_ids, output, r.generator, banned, r.guided, forced_token(r, output))


# Repetition penalties below this divide as this: logits / 5e-324 overflowed to inf, and softmax and
# log-softmax to NaN (fuzzed requests got 500s); at 1e-4 a seen token's logit is already 10^4 times its own.
MIN_REPETITION_PENALTY = 1e-4


def apply_penalties(logits: torch.Tensor, rows: Sequence[SampleRow]) -> None:
    """In place. logits: (B, vocab) float32."""
    for i, r in enumerate(rows):
        p = r.params
        if not p.needs_penalties:
            continue
        row = logits[i]
        if p.repetition_penalty != 1.0:
            seen = torch.tensor(sorted(set(r.prompt_ids) | set(r.output_ids)), dtype=torch.long)
            vals = row[seen]
            penalty = max(p.repetition_penalty, MIN_REPETITION_PENALTY)
            row[seen] = torch.where(vals > 0, vals / penalty, vals * penalty)
        if r.output_ids and (p.presence_penalty or p.frequency_penalty):
            ids, counts = torch.tensor(r.output_ids, dtype=torch.long).unique(return_counts=True)
            row[ids] -= p.frequency_penalty * counts.float() + p.presence_penalty


def apply_logit_bias(logits: torch.Tensor, rows: Sequence[SampleRow]) -> None:
    """In place: add each row's bias (OpenAI's logit_bias, token id -> [-100, 100])."""
    for i, r in enumerate(rows):
        if r.params.logit_bias:
            ids = torch.tensor(list(r.params.logit_bias), dtype=torch.long)
            logits[i, ids] += torch.tensor(list(r.params.logit_bias.values()), dtype=logits.dtype)


def apply_min_tokens(logits: torch.Tensor, rows: Sequence[SampleRow]) -> None:
    for i, r in enumerate(rows):
        if len(r.output_ids) < r.params.min_tokens and r.banned_until_min:
            logits[i, list(r.banned_until_min)] = float("-inf")


def apply_bad_words(logits: torch.Tensor, rows: Sequence[SampleRow]) -> None:
    """Mask the last token of each bad word whose other tokens end the sequence so far."""
    for i, r in enumerate(rows):
        for word in r.params.bad_words_ids:
            *head, last = word
            seq = list(r.prompt_ids) + list(r.output_ids)
            if not head or seq[len(seq) - len(head) :] == head:
                logits[i, last] = float("-inf")


def apply_forced(logits: torch.Tensor, rows: Sequence[SampleRow]) -> None:
    """In place: a row with a forced token keeps only that token (kept finite if a mask had removed it)."""
    for i, r in enumerate(rows):
        if r.forced is not None:
            keep = logits[i, r.forced].clamp_min(torch.finfo(logits.dtype).min)
            logits[i] = float("-inf")
            logits[i, r.forced] = keep


def logprobs_of(logprobs: torch.Tensor, token: int, top_n: int) -> TokenLogprob:
    """logprobs: (vocab,) log-softmax of one row."""
    lp = float(logprobs[token])
    rank = int((logprobs > logprobs[token]).sum()) + 1
    top = []
    if top_n:
        vals, ids = logprobs.topk(top_n)
        # A grammar or ban leaves some tokens at -inf: they are not alternatives (and not JSON).
        top = [(i, v) for i, v in zip(ids.tolist(), vals.tolist(), strict=True) if v != float("-inf")]
    return TokenLogprob(token, lp, rank, top)


def _untouched(r: SampleRow) -> bool:
    """Whether `processed` leaves r's row as it is: no penalty, bias, mask or forced token applies."""
    p = r.params
    return not (
        p.needs_penalties
        or p.logit_bias
        or p.bad_words_ids
        or r.guided is not None
        or r.forced is not None
        or (len(r.output_ids) < p.min_tokens and r.banned_until_min)
    )


def processed(logits: torch.Tensor, rows: Sequence[SampleRow]) -> torch.Tensor:
    """logits (B, vocab) with each row's penalties, bias and masks applied (before temperature): a copy, or
    logits itself where no row has any (a 262k-word vocabulary's copy cost more than the greedy pick)."""
    if all(_untouched(r) for r in rows):
        return logits
    logits = logits.clone()
    apply_penalties(logits, rows)
    apply_min_tokens(logits, rows)
    apply_logit_bias(logits, rows)
    apply_bad_words(logits, rows)
    apply_grammar_masks(logits, [r.guided for r in rows])
    apply_forced(logits, rows)
    return logits


def sample(logits: torch.Tensor, rows: Sequence[SampleRow]) -> tuple[list[int], list[TokenLogprob | None]]:
    """logits: (B, vocab) float32, one row per SampleRow. Returns token ids and their logprobs."""
    logits = processed(logits, rows)
    # greedy for every row (sampled rows overwrite below): the C kernel's pick, else max's indices (argmax's, the
    # first of ties, 2-3x as fast on CPU)
    tokens = pointwise.argmax(logits)
    if tokens is None:
        tokens = logits.max(dim=-1).indices.tolist()
    sampled = [i for i, r in enumerate(rows) if not r.params.greedy]
    if sampled:
        for i, tok in zip(sampled, _draw(logits[sampled], [rows[i] for i in sampled]), strict=True):
            tokens[i] = tok
    want = [i for i, r in enumerate(rows) if r.params.logprobs is not None]
    lps: list[TokenLogprob | None] = [None] * len(rows)
    if want:
        logp = torch.log_softmax(logits[want], dim=-1)  # of the penalized distribution, before temperature
        for j, i in enumerate(want):
            lps[i] = logprobs_of(logp[j], tokens[i], rows[i].params.logprobs or 0)
    return tokens, lps


# Temperatures below this divide as this: logits / 2.7e-118 overflow to inf and softmax to NaN (a
# fuzzed request got a 500); at 1e-5 the distribution is already one-hot but for exact ties.
MIN_TEMPERATURE = 1e-5


def _draw(logits: torch.Tensor, rows: Sequence[SampleRow]) -> list[int]:
    """Sample one token per row. logits: (S, vocab)."""
    probs_sorted, order = _truncated(logits, rows)
    out = []
    for i, r in enumerate(rows):
        pick = torch.multinomial(probs_sorted[i], 1, generator=r.generator)
        out.append(int(order[i, pick]))
    return out


def distribution(logits: torch.Tensor, rows: Sequence[SampleRow]) -> torch.Tensor:
    """The (S, vocab) probabilities a sampled row draws from (temperature, top-k, top-p, min-p applied;
    not renormalised). logits: (S, vocab), processed."""
    probs_sorted, order = _truncated(logits, rows)
    return torch.zeros_like(probs_sorted).scatter_(1, order, probs_sorted)


def _truncated(logits: torch.Tensor, rows: Sequence[SampleRow]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's probabilities after temperature and truncation, sorted descending, with their token ids."""
    temps = torch.tensor([r.params.temperature for r in rows]).clamp_min(MIN_TEMPERATURE).unsqueeze(1)  # (S, 1)
    probs_sorted, order = torch.sort(torch.softmax(logits / temps, dim=-1), dim=-1, descending=True)  # (S, vocab)
    ranks = torch.arange(logits.shape[1]).unsqueeze(0)  # (1, vocab)
    top_k = torch.tensor([r.params.top_k or logits.shape[1] for r in rows]).unsqueeze(1)
    top_p = torch.tensor([r.params.top_p for r in rows]).unsqueeze(1)
    min_p = torch.tensor([r.params.min_p for r in rows]).unsqueeze(1)
    drop = ranks >= top_k
    drop |= (probs_sorted.cumsum(dim=-1) - probs_sorted) >= top_p  # keeps the smallest set reaching top_p
    drop |= probs_sorted < min_p * probs_sorted[:, :1]
    drop[:, 0] = False  # the most likely token always survives
    return probs_sorted.masked_fill(drop, 0.0), order
