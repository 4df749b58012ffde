"""GuidedDecodingParams as tensorrt_llm/sampling_params.py declares it (1.0 to main), exported by llmapi:
a dataclass of which exactly one of json / regex / grammar / json_object / structural_tag is set."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, kw_only=True)
class GuidedDecodingParams:
    json: str | dict | None = None
    regex: str | None = None
    grammar: str | None = None
    json_object: bool = False
    structural_tag: str | None = None

    def __post_init__(self):
        count = sum(v not in (None, False) for v in (self.json, self.regex, self.grammar, self.structural_tag))
        if count + bool(self.json_object) > 1:
            raise ValueError("Only one guided decoding parameter can be set")
