"""The request rules every backend applies the same way: what can run, and what ends a sequence."""

from __future__ import annotations

import logging
from pathlib import Path

from trtserve.engine.errors import UserError
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.sampling import SamplingParams

log = logging.getLogger(__name__)


def check_request(req: GenerateRequest, *, max_seq_len: int, vocab_size: int, max_batch_size: int) -> None:
    """Raise UserError if the request can never run on an engine with these limits."""
    n, p = len(req.prompt_token_ids), req.params
    if n == 0:
        raise UserError("the prompt is empty; send at least one token")
    if n + p.max_tokens > max_seq_len:
        raise UserError(
            f"the prompt ({n} tokens) plus max_tokens ({p.max_tokens}) exceeds the engine's max_seq_len "
            f"({max_seq_len}); shorten the prompt or lower max_tokens"
        )
    if any(t < 0 or t >= vocab_size for t in req.prompt_token_ids):
        raise UserError(f"prompt token ids must lie in [0, {vocab_size})")
    if any(t < 0 or t >= vocab_size for t in p.logit_bias):
        raise UserError(f"logit_bias keys are token ids and must lie in [0, {vocab_size})")
    if any(t < 0 or t >= vocab_size for t in p.stop_token_ids):  # one beyond it was a 500 (tests/fuzz)
        raise UserError(f"stop token ids (stop_token_ids, end_id) must lie in [0, {vocab_size})")
    if p.n > max_batch_size:
        raise UserError(f"n ({p.n}) exceeds the engine's max_batch_size ({max_batch_size})")


def finish_reason(
    token: int, num_output: int, num_tokens: int, params: SamplingParams, eos_token_ids, max_seq_len: int
) -> tuple[str | None, int | None]:
    """(finish reason, stop token) after `token` became output token number `num_output` of a
    sequence that now holds `num_tokens` (prompt + output): None while it goes on."""
    if token in params.stop_token_ids:
        return "stop", token
    if not params.ignore_eos and token in eos_token_ids:
        return "stop", None
    if num_output >= params.max_tokens or num_tokens >= max_seq_len:
        return "length", None
    return None, None


def load_tokenizer(tokenizer_dir: Path):
    """The engine dir's tokenizer and its EOS ids: the tokenizer's own first, then those of
    generation_config.json (a chat model often ends turns with a second EOS).

    With a tokenizer.json, the `tokenizers`-only Tokenizer (engine/tokenizer.py), which keeps
    transformers off the start path; without one (a sentencepiece-only dir), transformers' AutoTokenizer."""
    from trtserve.engine.tokenizer import TOKENIZER_JSON, Tokenizer, read_json

    if (tokenizer_dir / TOKENIZER_JSON).is_file():
        tokenizer = Tokenizer(tokenizer_dir)
    else:
        from transformers import AutoTokenizer

        log.info("%s has no %s: loading the tokenizer with transformers", tokenizer_dir, TOKENIZER_JSON)
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    gen = read_json(tokenizer_dir / "generation_config.json").get("eos_token_id")
    for t in gen if isinstance(gen, list) else [gen] if gen is not None else []:
        if t not in ids:
            ids.append(t)
    return tokenizer, ids
