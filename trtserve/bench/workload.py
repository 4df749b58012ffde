"""Benchmark workloads: seeded, offline lists of requests with exact prompt and output lengths.

Prompts are token ids by default, so what the server computes is exactly `prompt_len` tokens (no
tokenizer round trip). Front ends that only take text (chat, KServe generate) get them detokenized
by the client before the clock starts; see `trtserve.bench.client`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Length = int | tuple[int, int]  # a fixed length, or an inclusive (lo, hi) range sampled uniformly

# ShareGPT-like lengths: log-normal, with means matching those the vLLM paper reports for ShareGPT
# (Kwon et al., SOSP 2023, Fig. 11: 161.31 input and 337.99 output tokens on average). The spreads
# (sigma) are our assumption, not a fit; the lengths are clipped the way `vllm bench serve` filters
# ShareGPT (prompt and output >= 4 tokens, prompt <= 1024, prompt + output <= 2048).
SHAREGPT_INPUT_MEAN, SHAREGPT_INPUT_SIGMA = 161.31, 1.0
SHAREGPT_OUTPUT_MEAN, SHAREGPT_OUTPUT_SIGMA = 337.99, 0.9


@dataclass
class BenchRequest:
    prompt: list[int] | str  # token ids (preferred) or text
    prompt_len: int  # tokens in the prompt (exact for token ids)
    output_len: int  # tokens to generate (max_tokens; exact with ignore_eos)


def _lengths(rng: np.random.Generator, n: int, length: Length, what: str) -> np.ndarray:
    lo, hi = (length, length) if isinstance(length, int) else length
    if lo < 1 or hi < lo:
        raise ValueError(f"{what} must be a positive length or a range lo:hi with 1 <= lo <= hi, got {length}")
    return rng.integers(lo, hi + 1, size=n)


def _tokens(rng: np.random.Generator, n: int, vocab_size: int) -> list[int]:
    # Ids 0..9 are avoided: tokenizers keep their special tokens (BOS, EOS, pad) at the low end.
    low = 10 if vocab_size > 20 else 0
    return rng.integers(low, vocab_size, size=n).tolist()


def random_requests(
    n: int, input_len: Length, output_len: Length, vocab_size: int, seed: int = 0
) -> list[BenchRequest]:
    """`n` requests of uniformly random token ids, lengths fixed or uniform in an inclusive range."""
    rng = np.random.default_rng(seed)
    ins, outs = _lengths(rng, n, input_len, "input_len"), _lengths(rng, n, output_len, "output_len")
    return [BenchRequest(_tokens(rng, int(i), vocab_size), int(i), int(o)) for i, o in zip(ins, outs, strict=True)]


def _lognormal(rng: np.random.Generator, n: int, mean: float, sigma: float) -> np.ndarray:
    mu = np.log(mean) - sigma**2 / 2  # so that E[X] = exp(mu + sigma^2 / 2) = mean
    return np.rint(rng.lognormal(mu, sigma, size=n)).astype(int)


def sharegpt_like(
    n: int, vocab_size: int, seed: int = 0, *, max_input_len: int = 1024, max_total_len: int = 2048
) -> list[BenchRequest]:
    """`n` requests with ShareGPT-like (log-normal) prompt and output lengths; see the constants above."""
    if max_input_len < 4 or max_total_len < max_input_len + 4:
        raise ValueError("sharegpt_like needs max_input_len >= 4 and max_total_len >= max_input_len + 4")
    rng = np.random.default_rng(seed)
    ins = np.clip(_lognormal(rng, n, SHAREGPT_INPUT_MEAN, SHAREGPT_INPUT_SIGMA), 4, max_input_len)
    outs = np.clip(_lognormal(rng, n, SHAREGPT_OUTPUT_MEAN, SHAREGPT_OUTPUT_SIGMA), 4, max_total_len - ins)
    return [BenchRequest(_tokens(rng, int(i), vocab_size), int(i), int(o)) for i, o in zip(ins, outs, strict=True)]


def shared_prefix(
    num_prefixes: int,
    questions_per_prefix: int,
    prefix_len: int,
    question_len: Length,
    output_len: Length,
    vocab_size: int,
    seed: int = 0,
) -> list[BenchRequest]:
    """K long random prefixes x M short random questions each (prompt = prefix + question), shuffled.

    With prefix caching every prompt after the first of its prefix can reuse `prefix_len` tokens.
    """
    if prefix_len < 1:
        raise ValueError(f"prefix_len must be at least 1, got {prefix_len}")
    rng = np.random.default_rng(seed)
    prefixes = [_tokens(rng, prefix_len, vocab_size) for _ in range(num_prefixes)]
    n = num_prefixes * questions_per_prefix
    qs, outs = _lengths(rng, n, question_len, "question_len"), _lengths(rng, n, output_len, "output_len")
    reqs = []
    for k, (q, o) in enumerate(zip(qs, outs, strict=True)):
        prompt = prefixes[k // questions_per_prefix] + _tokens(rng, int(q), vocab_size)
        reqs.append(BenchRequest(prompt, len(prompt), int(o)))
    order = rng.permutation(n)
    return [reqs[i] for i in order]
