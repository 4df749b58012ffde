"""What an engine timed of one traced sequence (`RequestOptions.trace`): each prefill chunk, each
speculative verification and its grammar's compile, in `time.monotonic()` seconds of the engine's host.

The engine fills a sequence's `Timeline` as it runs and hands it over on the sequence's last delta
(`TokenDelta.timeline`); serve turns it into spans (serve/telemetry/tracing_otel.py). An untraced
sequence has none, so the engine records nothing for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    began: float  # the step that computed it started running the model
    ended: float  # its tokens were in the KV cache
    start: int  # first prompt position it computed
    tokens: int  # prompt tokens it computed: positions [start, start + tokens)
    cached_tokens: int  # prompt tokens before `start` served by the prefix cache (0 when it continues a chunk)


@dataclass(frozen=True, slots=True)
class Verification:
    began: float  # the step that scored the proposals started running the model
    ended: float  # the target's verdict on them was known
    proposed: int  # proposals scored
    accepted: int  # proposals kept (those after a token that finished the sequence not counted)


@dataclass(frozen=True, slots=True)
class GrammarCompile:
    began: float  # the request waited for its grammar from here
    ended: float  # its grammar was ready and it joined the scheduler's queue
    kind: str  # GuidedDecoding.kind: json_schema, regex, grammar, choice, json_object
    cache_hit: bool  # the compiled grammar was cached (no compile ran for it)


@dataclass(slots=True)
class Timeline:
    """One sequence's timed engine work, in order; the engine appends, serve reads it once it is handed over."""

    prefill_chunks: list[PrefillChunk] = field(default_factory=list)
    verifications: list[Verification] = field(default_factory=list)
    grammar: GrammarCompile | None = None  # a constrained sequence's, None for an unconstrained one
