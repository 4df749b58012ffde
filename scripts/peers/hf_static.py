"""HF transformers `generate` over static, left-padded batches: the baseline of the vLLM paper.

A batch runs until its longest request has all its tokens (min_new_tokens = max_new_tokens, so EOS
never ends it early, like ignore_eos); each request's useful tokens are its own output_len. The
token times come from a stopping criterion, which `generate` calls once per decoding step.
"""

from __future__ import annotations

import time

import torch

from peers.inprocess import bench_run, request_result
from trtserve.bench.client import BenchRun
from trtserve.bench.workload import BenchRequest


class _StepClock:
    """A StoppingCriteria that never stops and records when each new token was produced."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, input_ids, scores, **kwargs) -> torch.Tensor:
        self.times.append(time.perf_counter())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


def warm_up(model) -> None:
    """One short generate, not measured (first-call allocation and kernel selection)."""
    with torch.inference_mode():
        model.generate(torch.tensor([[11, 12, 13, 14]]), max_new_tokens=4, do_sample=False, pad_token_id=0)


def run(model, requests: list[BenchRequest], batch_size: int, pad_id: int = 0) -> BenchRun:
    """Generate `requests` greedily in order, `batch_size` at a time; the workload arrives at once."""
    from transformers import StoppingCriteriaList

    results = [None] * len(requests)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, len(requests), batch_size):
            group = requests[start : start + batch_size]
            width = max(r.prompt_len for r in group)
            ids = torch.tensor([[pad_id] * (width - r.prompt_len) + list(r.prompt) for r in group])
            mask = torch.tensor([[0] * (width - r.prompt_len) + [1] * r.prompt_len for r in group])
            new = max(r.output_len for r in group)
            clock = _StepClock()
            model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=pad_id,
                stopping_criteria=StoppingCriteriaList([clock]),
            )
            done = time.perf_counter()
            for i, r in enumerate(group):
                results[start + i] = request_result(r, t0, clock.times, done)
    return bench_run(f"hf-static-{batch_size}", results, time.perf_counter() - t0)
