"""Where a reasoning model's thinking lies in its output tokens, and its budget: one request option.

The front end that knows the model's reasoning parser (serve/openai/reply.py) builds a `ThinkingSpan`
from its tags' token ids; the engine reads it to close the thinking once its budget is spent
(runtime/features/thinking.py) and to start a grammar only where the answer begins
(runtime/guided.py). `phase` is a pure function of the output so far, so speculative decoding
(output plus proposals), preemption (output kept) and prefix reuse all see the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trtserve.engine.errors import UserError


@dataclass(frozen=True, slots=True)
class Phase:
    """Where an output stands. `reasoning_from` None and `answer_from` None: undecided (the output is a
    proper prefix of the open tag)."""

    reasoning_from: int | None  # index of the first reasoning token; None: the reply does not think
    answer_from: int | None  # index of the first answer token; None: still thinking (or undecided)
    reasoning_tokens: int  # tokens inside the thinking so far, tags excluded
    closing: int  # tokens of the close tag already at the output's end (thinking not yet closed)


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingSpan:
    open_ids: tuple[int, ...]  # the open tag's tokens (`<think>`)
    close_ids: tuple[int, ...]  # the close tag's tokens (`</think>`): what the engine forces
    starts_inside: bool = False  # the prompt opened the tag: the reply begins inside the thinking
    budget: int | None = None  # reasoning tokens allowed before the engine forces `close_ids`; None: no limit

    def __post_init__(self):
        if not self.open_ids or not self.close_ids:
            raise UserError("a thinking span needs the open and close tags' token ids")
        if self.budget is not None and not 0 <= self.budget < 2**31:
            raise UserError(f"the thinking budget must lie in [0, 2**31) (got {self.budget})")

    def phase(self, output: Sequence[int]) -> Phase:
        """Where `output` (the sequence's output tokens) stands."""
        start = self._reasoning_from(output)
        if start is None:
            undecided = len(output) < len(self.open_ids) and tuple(output) == self.open_ids[: len(output)]
            return Phase(None, None if undecided else 0, 0, 0)
        end = _find(output, self.close_ids, start)
        if end >= 0:
            return Phase(start, end + len(self.close_ids), end - start, 0)
        closing = _held(output, self.close_ids, start)
        return Phase(start, None, len(output) - start - closing, closing)

    def forced(self, output: Sequence[int]) -> int | None:
        """The token the engine must emit next: the close tag's next token once the budget is spent."""
        if self.budget is None:
            return None
        p = self.phase(output)
        if p.reasoning_from is None or p.answer_from is not None or p.reasoning_tokens < self.budget:
            return None
        return self.close_ids[p.closing]

    def _reasoning_from(self, output: Sequence[int]) -> int | None:
        if self.starts_inside:
            return 0
        n = len(self.open_ids)
        return n if tuple(output[:n]) == self.open_ids else None


def _find(seq: Sequence[int], tag: tuple[int, ...], start: int) -> int:
    """The index of tag's first occurrence in seq at or after start; -1 if none."""
    first, n = tag[0], len(tag)
    seq = list(seq)
    i = start
    while True:
        try:
            i = seq.index(first, i)
        except ValueError:
            return -1
        if tuple(seq[i : i + n]) == tag:
            return i
        i += 1


def _held(seq: Sequence[int], tag: tuple[int, ...], start: int) -> int:
    """Length of the longest proper prefix of tag that ends seq (after start)."""
    for k in range(min(len(tag) - 1, len(seq) - start), 0, -1):
        if tuple(seq[len(seq) - k :]) == tag[:k]:
            return k
    return 0
