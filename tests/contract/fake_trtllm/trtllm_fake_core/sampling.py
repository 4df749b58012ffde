"""SamplingParams as TensorRT-LLM declares it, minus what differs by release.

Imitates tensorrt_llm/sampling_params.py (1.0 to main): a kw-only dataclass, so an unknown field is a
TypeError; `_validate` runs on construction and raises ValueError for greedy decoding with
best_of (= n by default) > 1 unless TLLM_ALLOW_N_GREEDY_DECODING is set. A release's
sampling_params.py subclasses this with its greedy rule and whether it checks ranges (1.1+).
"""

from __future__ import annotations

import os

from trtllm_fake_core.sampling_fields import SAMPLING_FIELDS


class SamplingParamsBase:
    range_checks = False  # 1.1 and later check top_p in [0, 1], top_k >= 0, temperature >= 0 in Python

    def __init__(self, **fields):
        unknown = set(fields) - SAMPLING_FIELDS
        if unknown:
            raise TypeError(f"SamplingParams.__init__() got unexpected keyword arguments {sorted(unknown)}")
        self.max_tokens = 32  # TensorRT-LLM's default
        self.n, self.best_of, self.use_beam_search = 1, None, False
        self.end_id = self.pad_id = self.top_k = self.top_p = self.temperature = self.seed = self.logprobs = None
        self.min_p = None
        self.return_perf_metrics = False  # True: each output carries request_perf_metrics (speculation.py)
        self.stop_token_ids, self.bad_token_ids = [], []
        self.min_tokens, self.ignore_eos, self.include_stop_str_in_output = 0, False, False
        for k, v in fields.items():
            setattr(self, k, v)
        self._validate()

    @property
    def _greedy_decoding(self) -> bool:
        raise NotImplementedError  # each release's rule

    def _validate(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError("max_tokens must be a positive int")
        best_of = self.best_of if self.best_of is not None else self.n
        if best_of < self.n:
            raise ValueError(f"best_of ({best_of}) cannot be less than n ({self.n})")
        if best_of > 1 and self._greedy_decoding and not os.environ.get("TLLM_ALLOW_N_GREEDY_DECODING"):
            raise ValueError(
                f"Greedy decoding in the LLM API does not allow multiple returns. Please set to best_of=1, got "
                f"best_of={best_of}. Please set to best_of=1 or set an environment variable "
                "TLLM_ALLOW_N_GREEDY_DECODING=1 to allow best_of > 1 under the greedy decoding."
            )
        if self.range_checks:
            if self.top_p is not None and not 0 <= self.top_p <= 1:
                raise ValueError(f"require 0 <= top_p <= 1, got top_p={self.top_p}")
            if self.top_k is not None and self.top_k < 0:
                raise ValueError(f"require top_k >= 0, got top_k={self.top_k}")
            if self.temperature is not None and self.temperature < 0:
                raise ValueError(f"require temperature >= 0, got temperature={self.temperature}")
