"""Which logprobs a TensorRT-LLM engine can return, by backend and release, and the 400s for the rest.

TensorRT path (`_tensorrt_engine.LLM`, 1.0-1.2): `BaseLLM._check_arguments` raises ValueError for
`SamplingParams.logprobs` unless the LLM was created with `gather_generation_logits=True`; the top k
are then computed from the generation logits (executor/base_worker.py `_get_logprobs`). trtserve's
TensorRT builds turn it on (serve_plan.tensorrt_runtime_options): the executor keeps a logits buffer
of max_batch_size x vocab floats and copies a request's logits out only when it asks for logprobs.
An engine dir built before that is refused logprobs with a 400 that names the setting.
What it costs: the logits buffer, and a single-GPU LLM that gathers generation logits runs its executor
worker in-process rather than in a process of its own, which upstream's llm.py warns may hurt streaming
performance. It is an LLM argument, so it cannot be switched per request: a run started
with `logprobs=False` (serve_plan.apply_runtime) drops it, and logprobs are then refused in one sentence.
PyTorch path: 1.0 returns the sampled token's logprob only; 1.1 the top k, which may leave the sampled
token out; 1.2 and later the top k and the sampled token (capabilities.py, SAMPLED_ONLY ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from trtserve.backends.tensorrt_llm.capabilities import SAMPLED_ONLY, TOPK_MAY_MISS, Capabilities
from trtserve.engine.errors import UserError
from trtserve.engine.sampling import MAX_LOGPROBS, SamplingParams

GATHER_KEY = "gather_generation_logits"  # the LLM argument (and options YAML key) of the TensorRT path


@dataclass(frozen=True)
class LogprobSupport:
    logprobs: bool  # the sampled token's logprob at all
    max_top: int  # most alternatives per token (0: the sampled token's only)
    sampled_in_top: bool  # the sampled token is always among what comes back (else only greedy is safe)
    why_not: str  # the sentence a refused request gets


def support(caps: Capabilities, backend: str, options: dict, built: dict | None = None) -> LogprobSupport:
    """What the engine of `backend` ("tensorrt" | "trtllm") on `caps`, created with `options`, returns.
    built: the engine dir's options as written (to tell a run that turned the logits off from a dir without)."""
    if backend == "tensorrt":
        on = bool(options.get(GATHER_KEY))
        why = (
            f"logprobs on a TensorRT engine need TensorRT-LLM started with {GATHER_KEY}: true, which this engine "
            "dir's llm_api_options.yaml lacks; rebuild it with `trtserve build ... --backend tensorrt --force`"
        )
        if not on and (built or {}).get(GATHER_KEY):
            why = (
                f"this TensorRT engine was started without {GATHER_KEY} (the run's logprobs: false, which spares "
                "TensorRT-LLM's in-process worker and logits buffer); restart it with logprobs on to ask for them"
            )
        return LogprobSupport(on, MAX_LOGPROBS if on else 0, True, why)
    if caps.torch_logprobs == SAMPLED_ONLY:
        why = f"{caps.label} returns the sampled token's logprob only; ask for top_logprobs 0, or use 1.1 or later"
        return LogprobSupport(True, 0, True, why)
    if caps.torch_logprobs == TOPK_MAY_MISS:
        why = (
            f"{caps.label} may leave the sampled token out of its top logprobs when sampling; ask for logprobs "
            "with greedy decoding (temperature 0), or use TensorRT-LLM 1.2 or later"
        )
        return LogprobSupport(True, MAX_LOGPROBS, False, why)
    return LogprobSupport(True, MAX_LOGPROBS, True, "")


def check_logprobs(p: SamplingParams, s: LogprobSupport) -> None:
    """UserError (400) for a logprobs request the engine cannot answer as asked."""
    if p.logprobs is None:
        return
    if not s.logprobs or p.logprobs > s.max_top or (not s.sampled_in_top and not p.greedy):
        raise UserError(f"logprobs={p.logprobs}: {s.why_not}")
