"""Per-request generation settings (names follow TensorRT-LLM's and vLLM's SamplingParams)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_tokens: int = Field(32, ge=1)  # new tokens at most (TensorRT-LLM's default)
    temperature: float = Field(1.0, ge=0.0)  # 0 = greedy
    top_k: int = Field(0, ge=0)  # 0 = off
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = None  # a seeded request samples the same tokens whatever the batch
    stop_token_ids: list[int] = []
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1
