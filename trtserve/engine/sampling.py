"""Per-request generation settings (names follow TensorRT-LLM's and vLLM's SamplingParams), and the
logprob record every backend returns for a token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_LOGPROBS = 20
MAX_LOGIT_BIAS = 100.0  # OpenAI's range: a bias of -100 bans a token, +100 all but forces it


class GuidedDecoding(BaseModel):
    """A grammar the output must match (vLLM's guided_* names; TensorRT-LLM's GuidedDecodingParams).

    `spec` is text so the spec is hashable and one compiled grammar serves every request with the
    same spec: json_schema: the schema as canonical JSON; regex: the pattern; grammar: EBNF
    (xgrammar/GBNF dialect, root rule `root`); choice: a JSON list of the allowed strings;
    json_object: "" (any JSON object).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["json_schema", "json_object", "regex", "grammar", "choice"]
    spec: str = ""


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int = Field(1, ge=1, le=16)  # sequences per prompt; they share the prompt's KV blocks
    max_tokens: int = Field(32, ge=1)  # new tokens at most (TensorRT-LLM's default)
    min_tokens: int = Field(0, ge=0)  # EOS and stop tokens are masked until this many are generated
    temperature: float = Field(1.0, ge=0.0, le=100.0)  # 0 = greedy
    top_k: int = Field(0, ge=0)  # 0 = off
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    min_p: float = Field(0.0, ge=0.0, le=1.0)  # drop tokens below min_p * the top probability
    repetition_penalty: float = Field(1.0, gt=0.0, le=10.0)  # HF/CTRL style, over prompt and output
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)  # OpenAI style, over output tokens
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    seed: int | None = None  # a seeded request samples the same tokens whatever the batch
    stop: list[str] = []  # stop strings, matched on detokenized text
    stop_token_ids: list[int] = []
    bad_words_ids: list[list[int]] = []  # token sequences never to complete (TensorRT-LLM's bad_words)
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)  # top-N alternatives per token (0: sampled only)
    prompt_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    skip_special_tokens: bool = True
    guided: GuidedDecoding | None = None  # constrain the output to a grammar (None: free text)
    logit_bias: dict[int, float] = {}  # token id -> added to its logit, in [-100, 100]

    @model_validator(mode="after")
    def _consistent(self) -> SamplingParams:
        if self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must not be empty")
        if any(abs(b) > MAX_LOGIT_BIAS for b in self.logit_bias.values()):
            raise ValueError(f"logit_bias values must lie in [-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}]")
        return self

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def needs_penalties(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    rank: int  # 1 = the most likely token
    top: list[tuple[int, float]]  # top-N (token id, logprob), most likely first
