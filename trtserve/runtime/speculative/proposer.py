"""Proposers: guess the next tokens of a running sequence, for one pass of the target to verify.

A proposer's q (the distribution its guesses are drawn from) is a point mass for both methods here
(ngram lookup, a draft model's greedy tokens), so verification accepts a guess x with probability p(x).
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from typing import Protocol

Ask = tuple[Sequence[int], int, Hashable]  # (a sequence's prompt + output so far, k, the sequence)


class Proposer(Protocol):
    def propose_batch(self, asks: list[Ask]) -> list[list[int]]:
        """For each ask, up to k tokens guessed to follow its tokens; [] for no guess."""
        ...

    def forget(self, seq: Hashable) -> None:
        """Sequence `seq` finished or was preempted: drop what is kept for it."""
        ...

    def sleep(self) -> None:
        """The engine sleeps (no sequence in flight): release what memory can be released."""
        ...

    def wake_up(self) -> None:
        """Undo sleep()."""
        ...


class NgramProposer:
    """Prompt lookup: for n from `max_n` down to `min_n`, find the most recent earlier occurrence of
    the sequence's last n tokens and propose the (up to k) tokens that followed it, up to the first of
    `stop` (an image's rows: their token ids say nothing of the text that follows)."""

    def __init__(self, min_n: int, max_n: int, stop: frozenset[int] = frozenset()):
        self.min_n, self.max_n, self.stop = min_n, max_n, stop

    def forget(self, seq: Hashable) -> None:
        pass  # keeps nothing per sequence

    def sleep(self) -> None:
        pass  # holds no memory

    def wake_up(self) -> None:
        pass

    def propose_batch(self, asks: list[Ask]) -> list[list[int]]:
        return [self.propose(token_ids, k) for token_ids, k, _ in asks]

    def propose(self, token_ids: Sequence[int], k: int) -> list[int]:
        size = len(token_ids)
        for n in range(min(self.max_n, size - 1), self.min_n - 1, -1):
            tail = list(token_ids[size - n :])
            last = tail[-1]
            # an occurrence at [j, j + n) must end before the tail starts being the tail: j + n < size
            for end in range(size - 2, n - 2, -1):  # end: index of the occurrence's last token
                if token_ids[end] == last and list(token_ids[end - n + 1 : end + 1]) == tail:
                    guess = _continuation(token_ids, end + 1, k)
                    return list(itertools.takewhile(lambda t: t not in self.stop, guess))
        return []


def _continuation(token_ids: Sequence[int], start: int, k: int) -> list[int]:
    """k tokens from `start` on; one that runs past the end continues with its own proposals (a
    repeating tail, as in `a b a b`, proposes whole periods rather than the one token left)."""
    out = list(token_ids[start : start + k])
    size = len(token_ids)
    while len(out) < k:
        out.append(out[start + len(out) - size])
    return out
