"""A request is validated once, when it is parsed (an OpenAI body, KServe's generate inputs):
`sampling_params` then builds the engine's SamplingParams without validating again. That is sound
only while every value the API accepts is one SamplingParams accepts too; these tests walk each
bounded field to its edges and check it."""

from __future__ import annotations

import annotated_types as at
import pytest

from trtserve.engine.sampling import SamplingParams
from trtserve.serve.kserve.protocol import GenerateInputs
from trtserve.serve.openai.protocol import ChatCompletionRequest, CompletionRequest

MESSAGES = [{"role": "user", "content": "hi"}]
# not sampling params (best_of must equal n; beam_width is 1 and length_penalty unused)
SKIP = {"timeout", "priority", "context_version", "best_of", "beam_width", "length_penalty", "pad_id"}


def _edges(model) -> list[tuple[str, object]]:
    """(field, value) for each end of each numeric field's allowed range."""
    out = []
    for name, field in model.model_fields.items():
        if name in SKIP:
            continue
        is_int = "int" in str(field.annotation)
        step = 1 if is_int else 1e-6
        for m in field.metadata:
            if isinstance(m, at.Ge):
                out.append((name, m.ge))
            elif isinstance(m, at.Gt):
                out.append((name, m.gt + step))
            elif isinstance(m, at.Le):
                out.append((name, m.le))
            elif isinstance(m, at.Lt):
                out.append((name, m.lt - step))
    return out


def _engine_params(body) -> SamplingParams:
    if isinstance(body, GenerateInputs):
        return body.sampling_params([[5]] * len(body.bad_words))
    if isinstance(body, ChatCompletionRequest):
        top = body.top_logprobs or 0 if body.logprobs else None
        return body.sampling_params(body.max_completion_tokens or body.max_tokens or 1, top)
    echo = body.logprobs if body.echo else None
    return body.sampling_params(body.max_tokens or 1, body.logprobs, echo)


CASES = [(ChatCompletionRequest, {"messages": MESSAGES}, e) for e in _edges(ChatCompletionRequest)]
CASES += [(CompletionRequest, {"prompt": "hi"}, e) for e in _edges(CompletionRequest)]
CASES += [(GenerateInputs, {"stop_words": ["x"], "bad_words": ["y"], "top_p": 0.5}, e) for e in _edges(GenerateInputs)]
CASES += [(GenerateInputs, {"return_log_probs": True}, e) for e in _edges(GenerateInputs)]


@pytest.mark.parametrize(("model", "base", "edge"), CASES, ids=lambda c: getattr(c, "__name__", str(c)))
def test_each_api_bound_is_within_the_engines(model, base, edge):
    name, value = edge
    # top_logprobs needs logprobs; a completion echoes so that its prompt logprobs are asked for too
    extra = {"logprobs": True} if model is ChatCompletionRequest and name == "top_logprobs" else {}
    extra |= {"echo": True} if model is CompletionRequest else {}
    extra |= {"max_tokens": max(value, 1)} if name == "min_tokens" else {}  # min_tokens > max_tokens is refused
    body = model.model_validate({**base, **extra, name: value})
    params = _engine_params(body)
    assert SamplingParams.model_validate(params.model_dump()) == params


def test_the_edges_cover_the_fields_that_reach_the_engine():
    named = {n for n, _ in _edges(ChatCompletionRequest)} | {n for n, _ in _edges(CompletionRequest)}
    assert {"max_tokens", "temperature", "top_p", "top_k", "min_p", "n", "seed", "min_tokens"} <= named
    assert {"presence_penalty", "frequency_penalty", "repetition_penalty", "top_logprobs", "logprobs"} <= named
    kserve = {n for n, _ in _edges(GenerateInputs)}
    assert {"max_tokens", "temperature", "top_k", "top_p", "min_p", "min_tokens", "seed", "random_seed"} <= kserve
    assert {"num_return_sequences", "end_id", "repetition_penalty"} <= kserve


def test_a_body_beyond_a_bound_is_refused_when_parsed():
    with pytest.raises(ValueError, match="temperature"):
        ChatCompletionRequest.model_validate({"messages": MESSAGES, "temperature": 2.5})
