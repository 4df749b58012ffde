"""Speculative decoding in the contract: the `speculative` engine option's value.

A proposer guesses up to `num_speculative_tokens` next tokens of a running sequence; the engine then
verifies them in one pass (as one longer decode row) and keeps the longest prefix the target model
agrees with, plus one token of its own. Greedy output is unchanged; sampled output keeps its
distribution (rejection sampling). `ngram` proposes from the sequence itself (prompt lookup);
`draft_model` runs a second, smaller engine dir with the same tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# where max_batch_size is unset: the limit for a backend without a measured switch (TensorRT-LLM's
# max_concurrency), and the running sequences a draft model's KV cache is sized for
AUTO_MAX_BATCH_SIZE = 8


class SpeculativeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: Literal["ngram", "draft_model"]
    num_speculative_tokens: int = Field(3, ge=1, le=16)  # proposed tokens verified per step and sequence
    # ngram: the last n tokens (n from max down to min) are looked up in the prompt and output so far;
    # the tokens that followed the most recent match are proposed
    prompt_lookup_min: int = Field(1, ge=1)
    prompt_lookup_max: int = Field(3, ge=1)
    draft_engine_dir: Path | None = None  # draft_model: its engine dir (same tokenizer as the target)
    # Speculation pauses for a step whose running batch is larger than this (verification then costs
    # more than it saves), and for a sequence whose rolling acceptance rate falls below min_acceptance.
    # None: a sequence speculates when its expected accepted tokens outweigh what its proposal rows cost
    # at the step's batch size, as measured (runtime/speculative/switch.py), at any batch size: where it
    # stops paying depends on the device and the workload (TensorRT-LLM: AUTO_MAX_BATCH_SIZE).
    max_batch_size: int | None = Field(None, ge=1)
    min_acceptance: float = Field(0.1, ge=0.0, le=1.0)

    @property
    def batch_limit(self) -> int:
        """The largest running batch that speculates on a backend without a measured switch (TensorRT-LLM's
        max_concurrency)."""
        return self.max_batch_size or AUTO_MAX_BATCH_SIZE

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeConfig:
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError(
                f"prompt_lookup_min {self.prompt_lookup_min} is above prompt_lookup_max {self.prompt_lookup_max}; "
                "give min <= max"
            )
        if self.method == "draft_model" and self.draft_engine_dir is None:
            raise ValueError("method draft_model needs draft_engine_dir: the draft's engine dir")
        if self.method == "ngram" and self.draft_engine_dir is not None:
            raise ValueError("draft_engine_dir is for method draft_model; remove it, or set method: draft_model")
        return self
