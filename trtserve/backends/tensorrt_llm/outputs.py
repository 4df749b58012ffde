"""TensorRT-LLM's streamed outputs -> our TokenDelta.

Two shapes are read: the executor's `FinishReason` enum (bindings, NOT_FINISHED 0, END_ID 1,
STOP_WORDS 2, LENGTH 3, TIMED_OUT 4, CANCELLED 5) and the LLM API's `CompletionOutput`
(`tensorrt_llm/executor/result.py`, 0.20-1.x: cumulative `token_ids`, `finish_reason` in
'stop' | 'length' | 'timeout' | 'cancelled', `stop_reason` int | str, `logprobs` as a list of
{token_id: Logprob(logprob, rank)} or, in older releases, of floats).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trtserve.backends.tensorrt_llm.spec_counts import request_counts
from trtserve.engine.ids import RequestId
from trtserve.engine.messages import TokenDelta
from trtserve.engine.sampling import TokenLogprob

# TensorRT-LLM finish reason (executor enum name or LLM-API string) -> ours ("stop" | "length" | "abort")
FINISH_REASONS: dict[str, str | None] = {
    "NOT_FINISHED": None,
    "END_ID": "stop",
    "STOP_WORDS": "stop",
    "LENGTH": "length",
    "TIMED_OUT": "abort",  # TensorRT-LLM's own deadline (allotted_time_ms); ours is enforced above the engine
    "CANCELLED": "abort",
    "stop": "stop",
    "length": "length",
    "timeout": "abort",
    "cancelled": "abort",
}
_ENUM_VALUES = ["NOT_FINISHED", "END_ID", "STOP_WORDS", "LENGTH", "TIMED_OUT", "CANCELLED"]


def map_finish_reason(value) -> str | None:
    """Ours for a FinishReason member, its int value, or an LLM-API string; None while running."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value < len(_ENUM_VALUES):
            raise ValueError(f"unknown TensorRT-LLM finish reason {value}")
        value = _ENUM_VALUES[value]
    name = getattr(value, "name", value)  # a pybind enum member has .name
    if name not in FINISH_REASONS:
        raise ValueError(f"unknown TensorRT-LLM finish reason {value!r}")
    return FINISH_REASONS[name]


def map_logprob(token_id: int, entry, top_n: int) -> TokenLogprob:
    """One generated token's logprob entry -> TokenLogprob with the top_n alternatives."""
    if isinstance(entry, dict):
        ranked = sorted(entry.items(), key=lambda kv: (_rank(kv[1]), -_lp(kv[1])))
        own = entry.get(token_id)
        logprob = _lp(own) if own is not None else float("nan")
        rank = _rank(own) if own is not None and _rank(own) < 10**9 else 0
        return TokenLogprob(token_id, logprob, rank, [(t, _lp(v)) for t, v in ranked[:top_n]])
    return TokenLogprob(token_id, float(entry), 0, [])  # releases that return the sampled logprob only


def _lp(v) -> float:
    return float(getattr(v, "logprob", v))


def _rank(v) -> int:
    r = getattr(v, "rank", None)
    return r if r is not None else 10**9


@dataclass
class DeltaTracker:
    """Turns one request's successive RequestOutput snapshots into TokenDeltas (new tokens only)."""

    request_id: RequestId
    num_prompt_tokens: int
    stop_token_ids: frozenset[int] = frozenset()  # the user's: only these are reported as stop_reason
    top_logprobs: int | None = None  # ours: None = no logprobs
    read_spec: bool = False  # each output's request_perf_metrics carry speculative-decoding counts
    seen: dict[int, int] = field(default_factory=dict)  # sequence index -> tokens already delivered
    finished: set[int] = field(default_factory=set)

    def deltas(self, request_output) -> list[TokenDelta]:
        out = []
        for seq in request_output.outputs:
            i = seq.index
            if i in self.finished:
                continue
            ids = list(seq.token_ids or [])
            start = self.seen.get(i, 0)
            new = ids[start:]
            finish = map_finish_reason(getattr(seq, "finish_reason", None))
            if not new and finish is None:
                continue
            delta = TokenDelta(self.request_id, index=i, token_ids=new, num_prompt_tokens=self.num_prompt_tokens)
            if self.top_logprobs is not None and seq.logprobs:
                entries = list(seq.logprobs)[start : start + len(new)]
                delta.logprobs = [map_logprob(t, e, self.top_logprobs) for t, e in zip(new, entries, strict=False)]
            if self.read_spec:
                delta.spec = request_counts(seq)  # running totals: the last delta's are the sequence's
            if finish is not None:
                delta.finish_reason = finish
                stop = getattr(seq, "stop_reason", None)
                delta.stop_reason = stop if isinstance(stop, int) and stop in self.stop_token_ids else None
                self.finished.add(i)
            self.seen[i] = len(ids)
            out.append(delta)
        return out

    def abort_all(self, n: int, error: str | None = None) -> list[TokenDelta]:
        """Final deltas for the sequences still running (engine error or shutdown)."""
        out = []
        for i in range(n):
            if i not in self.finished:
                self.finished.add(i)
                reason = "error" if error else "abort"
                out.append(TokenDelta(self.request_id, index=i, finish_reason=reason, error=error))
        return out
