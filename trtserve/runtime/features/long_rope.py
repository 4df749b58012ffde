"""LongRoPE (Phi-3) and the prefix cache: a prompt longer than the original context runs on the long
factors from its first token (models/rope.py), so its blocks must never match blocks a shorter prompt
cached under the short ones. Attached only to a LongRoPE model; it keys such a request's blocks apart."""

from __future__ import annotations

from trtserve.models.decoder import DecoderModel
from trtserve.runtime.features import EngineFeature
from trtserve.runtime.request import Request


class LongRopeScope(EngineFeature):
    def __init__(self, long_from: int):
        self.long_from = long_from  # the longest sequence the short factors serve

    def on_add(self, r: Request) -> None:
        r.rope_long = r.num_prompt_tokens > self.long_from


def long_rope_scopes(model: DecoderModel) -> list[EngineFeature]:
    """The feature for a LongRoPE model (its rope's long_from set), none for any other."""
    long_from = model.rope.long_from
    return [LongRopeScope(long_from)] if long_from is not None else []
