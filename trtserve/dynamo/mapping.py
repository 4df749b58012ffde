"""Dynamo's request and response dicts <-> the engine's typed messages: pure functions, no Dynamo import.

Dynamo's frontend tokenizes, applies the chat template, detokenizes and matches stop strings; a worker
sees token ids in (`token_ids`, `stop_conditions`, `sampling_options`, `output_options`,
`eos_token_ids`) and yields token ids out (`{"token_ids", "index"}`, the last chunk of a choice with
`finish_reason` and `completion_usage`). See dynamo/common/backend/engine.py's GenerateRequest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from trtserve.engine.errors import UserError
from trtserve.engine.messages import TokenDelta
from trtserve.engine.rules import finish_reason
from trtserve.engine.sampling import GuidedDecoding, SamplingParams

# our finish reasons -> Dynamo's (the Rust layer turns "cancelled" into the client's "abort")
FINISH = {"stop": "stop", "length": "length", "abort": "cancelled", "error": "error"}
# sampling_options keys that carry over unchanged (None: the default)
_SAME = ("n", "temperature", "top_p", "min_p", "seed", "presence_penalty", "frequency_penalty", "repetition_penalty")


def prompt_of(request: Mapping[str, Any]) -> list[int]:
    tokens = request.get("token_ids")
    if not isinstance(tokens, list) or not tokens:
        raise UserError("the request has no token_ids; send a non-empty prompt")
    return [int(t) for t in tokens]


def eos_ids(request: Mapping[str, Any]) -> list[int]:
    """The end-of-sequence ids the frontend sent (the model card's, and the stop conditions' hidden ones)."""
    stop = request.get("stop_conditions") or {}
    ids = list(request.get("eos_token_ids") or []) + list(stop.get("stop_token_ids_hidden") or [])
    return list(dict.fromkeys(int(t) for t in ids))


def sampling_params(request: Mapping[str, Any], default_max_tokens: int) -> SamplingParams:
    """SamplingParams from the request's sampling_options, stop_conditions and output_options.

    Stop strings are the frontend's (it detokenizes); stop token ids and EOS stop here. The hidden
    stop ids are EOS ids: they stop the sequence unless ignore_eos is set.
    """
    sampling = request.get("sampling_options") or {}
    stop = request.get("stop_conditions") or {}
    output = request.get("output_options") or {}
    fields: dict[str, Any] = {k: sampling[k] for k in _SAME if sampling.get(k) is not None}
    top_k = sampling.get("top_k")
    if top_k is not None and top_k > 0:  # Dynamo and vLLM say -1 (or 0) for "off"; ours is 0
        fields["top_k"] = top_k
    ignore_eos = bool(stop.get("ignore_eos") or False)
    stop_ids = list(stop.get("stop_token_ids") or [])
    if not ignore_eos:
        stop_ids += [t for t in stop.get("stop_token_ids_hidden") or [] if t not in stop_ids]
    fields.update(
        max_tokens=stop.get("max_tokens") or default_max_tokens,
        min_tokens=stop.get("min_tokens") or 0,
        ignore_eos=ignore_eos,
        stop_token_ids=stop_ids,
    )
    if output.get("logprobs") is not None:
        fields["logprobs"] = int(output["logprobs"])
    if output.get("prompt_logprobs") is not None:
        fields["prompt_logprobs"] = int(output["prompt_logprobs"])
    guided = guided_of(sampling.get("guided_decoding"))
    if guided is not None:
        fields["guided"] = guided
    try:
        return SamplingParams(**fields)
    except ValidationError as err:
        first = err.errors()[0]
        raise UserError(f"bad sampling option {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def guided_of(spec: Mapping[str, Any] | None) -> GuidedDecoding | None:
    """Dynamo's guided_decoding {json | regex | choice | grammar | json_object} as ours."""
    if not spec:
        return None
    import json

    if spec.get("json") is not None:
        schema = spec["json"]
        return GuidedDecoding(kind="json_schema", spec=schema if isinstance(schema, str) else json.dumps(schema))
    if spec.get("regex"):
        return GuidedDecoding(kind="regex", spec=spec["regex"])
    if spec.get("choice"):
        return GuidedDecoding(kind="choice", spec=json.dumps(list(spec["choice"])))
    if spec.get("grammar"):
        return GuidedDecoding(kind="grammar", spec=spec["grammar"])
    if spec.get("json_object"):
        return GuidedDecoding(kind="json_object")
    return None


def first_token_finishes(token: int, prompt_len: int, params: SamplingParams, eos: list[int], max_seq_len: int):
    """The finish reason (or None) of a decode whose first token came from the prefill worker."""
    return finish_reason(token, 1, prompt_len + 1, params, eos, max_seq_len)[0]


def chunk_of(delta: TokenDelta, completion_tokens: int) -> dict[str, Any]:
    """One Dynamo response chunk; completion_tokens: the sequence's output so far (usage on the last)."""
    out: dict[str, Any] = {"token_ids": list(delta.token_ids), "index": delta.index}
    if delta.logprobs:
        out["log_probs"] = [lp.logprob for lp in delta.logprobs]
        out["top_logprobs"] = [
            [{"rank": rank, "token_id": t, "logprob": p} for rank, (t, p) in enumerate(lp.top, 1)]
            for lp in delta.logprobs
        ]
    if delta.finish_reason is not None:
        out["finish_reason"] = FINISH.get(delta.finish_reason, "error")
        out["completion_usage"] = usage(delta.num_prompt_tokens, completion_tokens, delta.num_cached_tokens)
    return out


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def block_hash(key: bytes) -> int:
    """A prefix key as the signed 64-bit id Dynamo's KV publisher takes (its first 8 bytes)."""
    return int.from_bytes(key[:8], "little", signed=True)
