"""Grammar-constrained decoding with xgrammar: compiled grammars, per-sequence matchers, masks.

One `Grammars` per engine: it owns the xgrammar compiler for the engine's tokenizer and a bounded
LRU cache of compiled grammars keyed by the request's `GuidedDecoding` (kind, spec), so a schema
is compiled once however many requests use it. Each constrained sequence holds a `GuidedState`:
a matcher that has accepted exactly the sequence's output tokens. Each step the sampler asks the
state for its token bitmask (only rows of constrained sequences pay for it) and the engine core
advances it with the token that was emitted.

Invariant: `state.num_accepted == len(output_token_ids)`. Preemption in this engine recomputes
the KV cache but keeps the output tokens, so the matcher stays valid; `sync` rolls it back (or
forward) to any other output length should a path drop or replay tokens.

A reasoning model's grammar starts after its thinking (the request's `ThinkingSpan`): the state sees
every output token, but only those from the answer's first on reach the matcher; while thinking
its row is not masked. A reply that may still open its thinking (a one-token open tag, not yet
written) may take the open tag besides what the grammar allows. A tag of several tokens that the
prompt did not open is ordinary text there: the grammar applies from the first token.

xgrammar (and TokenizerInfo, which walks the whole vocabulary) is loaded on the first
constrained request, so servers that never see one pay nothing at start-up.

Where the time goes: `validate` only parses the spec (tens of ms for a large schema) and runs on
the caller's thread, so a bad spec is a 400 before anything is queued; `submit` compiles on a worker
thread (xgrammar releases the GIL: neither the event loop nor the engine loop stalls), and the
engine core keeps the request out of the batch until its grammar is ready.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from trtserve.engine.errors import UserError
from trtserve.engine.sampling import GuidedDecoding
from trtserve.engine.thinking import ThinkingSpan

DEFAULT_CACHE_SIZE = 128  # compiled grammars kept; a large JSON schema's is ~0.1-1 MB


class Grammars:
    """Compiles and caches grammars for one tokenizer. Thread-safe: requests are checked on the
    server's event loop while the engine thread creates matchers."""

    def __init__(
        self, tokenizer, vocab_size: int, stop_token_ids: Sequence[int], max_entries: int = DEFAULT_CACHE_SIZE
    ):
        """vocab_size: the model's (its lm_head rows), which may exceed the tokenizer's: the extra
        ids are never allowed by a grammar, so the mask pads them out."""
        self.tokenizer, self.vocab_size, self.stop_token_ids = tokenizer, vocab_size, list(stop_token_ids)
        self.max_entries = max_entries
        self._cache: OrderedDict[GuidedDecoding, object] = OrderedDict()
        self._lock = threading.Lock()
        self._compiler = None
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[GuidedDecoding, Future] = {}  # compiles under way, shared by equal specs
        self.hits = self.misses = 0

    def _xgr_compiler(self):
        if self._compiler is None:
            import xgrammar as xgr

            from trtserve.engine.tokenizer import huggingface_tokenizer

            info = xgr.TokenizerInfo.from_huggingface(
                huggingface_tokenizer(self.tokenizer), vocab_size=self.vocab_size, stop_token_ids=self.stop_token_ids
            )
            # xgrammar's own cache is off: ours is bounded and keyed by the request's spec.
            self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        return self._compiler

    def compile(self, guide: GuidedDecoding):
        """The compiled grammar of `guide`; UserError (400) naming the problem if it cannot compile."""
        with self._lock:
            hit = self._cache.get(guide)
            if hit is not None:
                self._cache.move_to_end(guide)
                self.hits += 1
                return hit
            compiler = self._xgr_compiler()
        compiled = _compile(compiler, guide)  # outside the lock: a large schema takes a while
        with self._lock:
            self.misses += 1
            self._cache[guide] = compiled
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return compiled

    def is_cached(self, guide: GuidedDecoding) -> bool:
        """Its compiled grammar is cached: `submit` will not compile it."""
        with self._lock:
            return guide in self._cache

    def validate(self, guide: GuidedDecoding) -> None:
        """UserError (400) if the spec does not parse; cheap next to compiling it."""
        if guide in self._cache:
            return
        import xgrammar as xgr

        try:
            if guide.kind == "json_schema":
                json_schema_ebnf(guide.spec)
            elif guide.kind == "regex":
                xgr.Grammar.from_regex(guide.spec)
            elif guide.kind in ("grammar", "choice"):
                xgr.Grammar.from_ebnf(guide.spec if guide.kind == "grammar" else choice_ebnf(json.loads(guide.spec)))
        except UserError:
            raise
        except Exception as err:
            raise _spec_error(guide, err) from None

    def submit(self, guide: GuidedDecoding) -> Future:
        """A future of the compiled grammar: done at once if cached, else compiled on a worker thread."""
        with self._lock:
            hit = self._cache.get(guide)
            if hit is None and guide in self._pending:
                return self._pending[guide]
        if hit is not None:
            done: Future = Future()
            done.set_result(self.compile(guide))
            return done
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="trtserve-grammar")
            fut = self._pending.get(guide) or self._pool.submit(self.compile, guide)
            self._pending[guide] = fut
        fut.add_done_callback(lambda _: self._pending.pop(guide, None))
        return fut

    def new_state(self, guide: GuidedDecoding, thinking: ThinkingSpan | None = None) -> GuidedState:
        return self.state_of(self.compile(guide), thinking)

    @staticmethod
    def state_of(compiled, thinking: ThinkingSpan | None = None) -> GuidedState:
        """A fresh matcher at the start of a compiled grammar (after the thinking, for a reasoning model)."""
        import xgrammar as xgr

        return GuidedState(xgr.GrammarMatcher(compiled), thinking)


def _compile(compiler, guide: GuidedDecoding):
    try:
        if guide.kind == "json_schema":
            return compiler.compile_grammar(json_schema_ebnf(guide.spec))
        if guide.kind == "json_object":
            return compiler.compile_json_schema('{"type": "object"}', any_whitespace=False, strict_mode=False)
        if guide.kind == "regex":
            return compiler.compile_regex(guide.spec)
        if guide.kind == "choice":
            return compiler.compile_grammar(choice_ebnf(json.loads(guide.spec)))
        return compiler.compile_grammar(guide.spec)
    except UserError:
        raise
    except Exception as err:  # xgrammar raises RuntimeError/ValueError/its own types for bad specs
        raise _spec_error(guide, err) from None


def _spec_error(guide: GuidedDecoding, err: Exception) -> UserError:
    what = {"json_schema": "JSON schema", "regex": "regex", "grammar": "EBNF grammar", "choice": "choice list"}
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    first = re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", first)  # xgrammar's "[time] file.cc:line: " prefix
    return UserError(
        f"the {what.get(guide.kind, guide.kind)} cannot be compiled into a grammar ({first}); fix it or leave it out"
    )


# xgrammar 0.2.9 writes the characters of a string with minLength/maxLength as [^"\\\r\n], which
# lets raw control characters (U+0000-U+001F) through: invalid JSON (RFC 8259 wants them escaped),
# and a noise model emits them. Its unbounded strings use the right class; so do we.
_LENIENT_STRING_CHAR = r"[^\"\\\r\n]"
_JSON_STRING_CHAR = r"[^\0-\x1f\"\\]"


def json_schema_ebnf(schema: str) -> str:
    """The EBNF of a JSON schema: compact JSON (no free whitespace, so a model cannot stall in an
    endless run of spaces), strings without raw control characters."""
    import xgrammar as xgr

    text = str(xgr.Grammar.from_json_schema(schema, any_whitespace=False))
    return text.replace(_LENIENT_STRING_CHAR, _JSON_STRING_CHAR)


def choice_ebnf(choices: list[str]) -> str:
    """EBNF whose language is exactly `choices`."""
    if not choices:
        raise UserError("guided_choice must hold at least one string")
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


class GuidedState:
    """One sequence's matcher; has seen `num_accepted` of its output tokens, and accepted those of its
    answer (all of them without a thinking span)."""

    def __init__(self, matcher, thinking: ThinkingSpan | None = None):
        self.matcher = matcher
        if thinking is not None and not thinking.starts_inside and len(thinking.open_ids) > 1:
            thinking = None  # a tag of several tokens the prompt did not open: the grammar applies at once
        self.thinking = thinking
        self.tokens: list[int] = []  # the output tokens seen
        self.answer_from: int | None = self._answer_from()  # where the matcher's tokens begin; None: thinking

    @property
    def num_accepted(self) -> int:
        return len(self.tokens)

    @property
    def constraining(self) -> bool:
        """The grammar shapes the next token (it does not while thinking)."""
        return self.answer_from is not None or self._may_open

    @property
    def _may_open(self) -> bool:
        """Nothing written yet, and the reply may still open its thinking with a one-token tag."""
        return (
            self.answer_from is None
            and not self.tokens
            and self.thinking is not None
            and not self.thinking.starts_inside
        )

    def _answer_from(self) -> int | None:
        return 0 if self.thinking is None else self.thinking.phase(self.tokens).answer_from

    def sync(self, output_ids: Sequence[int]) -> None:
        """Make the state stand after exactly `output_ids` (rollback or replay)."""
        if self.num_accepted > len(output_ids):
            keep = len(output_ids)
            if self.answer_from is not None:
                self.matcher.rollback(self.num_accepted - max(keep, self.answer_from))
            del self.tokens[keep:]
            if self.answer_from is not None and keep < self.answer_from:
                self.answer_from = self._answer_from()
        for t in output_ids[self.num_accepted :]:
            self.accept(t)

    def accept(self, token: int) -> bool:
        """Advance by the emitted token; False if the grammar refused it (the state is unchanged)."""
        if self.answer_from is None:
            if self._may_open and token != self.thinking.open_ids[0]:
                self.answer_from = 0  # the reply does not think: the grammar starts here
            else:
                self.tokens.append(token)
                if token == self.thinking.close_ids[-1] or len(self.tokens) <= len(self.thinking.open_ids):
                    self.answer_from = self._answer_from()  # only a close tag's last token can end the thinking
                return True
        ok = self.matcher.accept_token(token)
        if ok:
            self.tokens.append(token)
        return ok

    def fill(self, bitmask, row: int) -> None:
        """Row `row` of bitmask: the tokens allowed next (the open tag too while the reply may open it)."""
        self.matcher.fill_next_token_bitmask(bitmask, row)
        if self._may_open:
            t = self.thinking.open_ids[0]
            bit = 1 << (t % 32)
            bitmask[row, t // 32] |= bit - 2**32 if bit >= 2**31 else bit  # int32 words

    @property
    def is_terminated(self) -> bool:
        """The grammar is complete and has accepted its stop token: nothing more may follow."""
        return self.answer_from is not None and self.matcher.is_terminated()


def apply_grammar_masks(logits: torch.Tensor, states: Sequence[GuidedState | None]) -> None:
    """In place: -inf for every token the row's grammar forbids. logits: (B, vocab); rows whose
    state is None or thinking are left as they are (and cost nothing). A row whose other masks (min_tokens,
    bad words, logit_bias) left no allowed token falls back to the grammar's choice alone."""
    rows = [i for i, s in enumerate(states) if s is not None and s.constraining]
    if not rows:
        return
    import xgrammar as xgr

    vocab = logits.shape[1]
    bitmask = xgr.allocate_token_bitmask(len(rows), vocab)  # (R, ceil(vocab / 32)) int32, all allowed
    for j, i in enumerate(rows):
        states[i].fill(bitmask, j)
    masked = logits[rows]  # (R, vocab) a copy
    xgr.apply_token_bitmask_inplace(masked, bitmask.to(logits.device), vocab_size=vocab)
    dead = ~torch.isfinite(masked).any(dim=-1)  # (R,) no token left after the grammar's mask
    if dead.any():
        fresh = torch.zeros_like(masked[dead])
        xgr.apply_token_bitmask_inplace(fresh, bitmask[dead.cpu()].to(logits.device), vocab_size=vocab)
        masked[dead] = fresh  # uniform over what the grammar allows
    logits[rows] = masked
