"""Token deltas -> text: detokenization and stop strings, shared by every backend and front end."""

from __future__ import annotations

from dataclasses import dataclass, field

from trtserve.engine.ids import RequestId
from trtserve.engine.messages import TokenDelta
from trtserve.engine.sampling import SamplingParams, TokenLogprob
from trtserve.engine.stats import SpecCounts
from trtserve.text.detokenizer import IncrementalDetokenizer, StopStringMatcher


@dataclass
class CompletionOutput:
    """One sequence's output so far."""

    index: int
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    stop_reason: int | str | None = None  # stop token id or stop string
    spec: SpecCounts | None = None  # speculative decoding's counts for it (None: it never speculated)


@dataclass
class TextDelta:
    """What one engine delta adds to a sequence, as text."""

    request_id: RequestId  # the engine request it belongs to
    index: int
    text: str
    token_ids: list[int]
    logprobs: list[TokenLogprob] | None
    finish_reason: str | None
    stop_reason: int | str | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    """A request's own timings, in seconds (None: it never got that far), for a client that asked with
    `return_metrics` (the serving layer fills it in when the request ends)."""

    time_to_first_token: float | None
    queue_time: float | None  # in the engine's queue, before first scheduled
    prefill_time: float | None  # first scheduled -> first token
    generation_time: float | None  # first token -> last
    e2e_latency: float
    mean_inter_token_latency: float | None
    tokens_per_second: float | None  # decode tokens (after each sequence's first) per generation second
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int  # prompt tokens served by the prefix cache

    # pydantic (a receipt's `metrics`) refuses other keys: its JSON schema says so too (additionalProperties)
    __pydantic_config__ = {"extra": "forbid"}


@dataclass
class RequestOutput:
    request_id: str  # what the caller named it (a client id, or the engine id as text)
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    num_cached_tokens: int = 0
    prompt_logprobs: list[TokenLogprob | None] | None = None
    error: str | None = None
    metrics: RequestMetrics | None = None  # its timings, once it ended, when asked for (return_metrics)

    @property
    def finished(self) -> bool:
        return all(o.finish_reason is not None for o in self.outputs)

    # The first sequence, for the common n == 1 case.
    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids

    @property
    def finish_reason(self) -> str | None:
        return self.outputs[0].finish_reason


class _Sequence:
    def __init__(self, tokenizer, prompt_ids, params: SamplingParams):
        self.detok = IncrementalDetokenizer(tokenizer, prompt_ids, params.skip_special_tokens)
        self.stops = StopStringMatcher(params.stop, params.include_stop_str_in_output)


class OutputProcessor:
    """Turns one request's TokenDeltas into TextDeltas and accumulates its RequestOutput."""

    def __init__(self, tokenizer, request_id: str, prompt_ids: list[int], params: SamplingParams):
        self.params = params
        self.output = RequestOutput(request_id, list(prompt_ids), [CompletionOutput(i) for i in range(params.n)])
        self._seqs = [_Sequence(tokenizer, prompt_ids, params) for _ in range(params.n)]

    def process(self, d: TokenDelta) -> TextDelta | None:
        """Returns None once the sequence has finished (late deltas after a stop string)."""
        out, seq = self.output.outputs[d.index], self._seqs[d.index]
        if out.finish_reason is not None:
            return None
        self.output.num_cached_tokens = d.num_cached_tokens
        if d.prompt_logprobs is not None:
            self.output.prompt_logprobs = d.prompt_logprobs
        if d.error:
            self.output.error = d.error
        if d.spec is not None:  # the counts so far: the last one seen is the sequence's total
            out.spec = d.spec
        text = seq.stops.feed(seq.detok.add(d.token_ids)) if d.token_ids else ""
        finish, stop_reason = d.finish_reason, d.stop_reason
        if seq.stops.matched is not None:
            finish, stop_reason = "stop", seq.stops.matched
        elif finish is not None:
            text += seq.stops.feed(seq.detok.flush())
            if seq.stops.matched is not None:
                finish, stop_reason = "stop", seq.stops.matched
            else:
                text += seq.stops.flush()
        out.token_ids += d.token_ids
        out.text += text
        if d.logprobs is not None:
            out.logprobs = (out.logprobs or []) + d.logprobs
        out.finish_reason, out.stop_reason = finish, stop_reason
        return TextDelta(d.request_id, d.index, text, d.token_ids, d.logprobs, finish, stop_reason, d.error)

    def stopped_by_string(self, index: int) -> bool:
        """The sequence ended on a stop string; the engine still runs it and should abort it."""
        return self._seqs[index].stops.matched is not None
