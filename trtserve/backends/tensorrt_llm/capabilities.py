"""What the TensorRT-LLM in use can do: one table, keyed by what that TensorRT-LLM really has.

Every decision that depends on the TensorRT-LLM release reads a `Capabilities`: the options YAML and
the LLM kwargs (serve_plan), the `trtllm-serve` line (serve_plan), the compatibility check (compat),
the build strategies' host checks and `trtserve doctor`. A `Capabilities` comes from one of:

    probe(tllm)       the imported module, introspected: the LLM-args fields (pydantic `model_fields`
                      of TorchLlmArgs / TrtLlmArgs), `tensorrt_llm._tensorrt_engine`,
                      `tensorrt_llm.commands.build` (trtllm-build) and, for doctor, trtllm-serve's
                      --backend choices (its click command; importing it is heavy, so not on load)
    installed()       the installed distribution's metadata, without importing it (slow, and it wants
                      a GPU): its version, console scripts and files
    planned("1.0")    the release table below, for a release that is not installed (--trtllm-version)

The release table is what TensorRT-LLM's own source says per release line (fact sheet section 10,
PR numbers there). Version numbers only pick the table's row; introspection overrides it, so a
1.3.0rc that still has the TensorRT backend is recognised as having it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from types import ModuleType

from trtserve.backends.tensorrt_llm.lora import LORA_FIELDS
from trtserve.engine.errors import UserError

# LLM-args fields trtserve emits, present in every release line (TorchLlmArgs, and TrtLlmArgs of 1.0-1.2).
TORCH_ARGS = frozenset(
    {"max_batch_size", "max_num_tokens", "max_seq_len", "enable_chunked_prefill", "kv_cache_config"}
    | {"cuda_graph_config", "enable_iter_perf_stats", "model", "tokenizer", "tensor_parallel_size", "lora_config"}
    | {"speculative_config"}
)
TRT_ARGS = frozenset({"max_batch_size", "max_num_tokens", "max_seq_len", "kv_cache_config", "lora_config"})
TRT_ARGS |= {"model", "tokenizer", "tensor_parallel_size", "enable_chunked_prefill", "gather_generation_logits"}
# TorchLlmArgs' sampler switch of 1.0: without it the PyTorch backend samples greedily
# (tensorrt_llm/_torch/pyexecutor/_util.py, instantiate_sampler). Gone in 1.1 (unknown keys raise).
SAMPLER_SWITCH = "enable_trtllm_sampler"
# What turns sleep / wake-up on (the executor's memory under a virtual-memory allocator), by release:
# `enable_sleep: true` (1.1-1.2), then `sleep_config: {}` (SleepConfig, main). Placed by upstream's
# tests/unittest/llmapi/test_llm_sleep*.py at their dates, not read in each release's llm_args.py.
SLEEP_ARGS = {"enable_sleep": True, "sleep_config": {}}
RELEASE_SPECIFIC_ARGS = frozenset({SAMPLER_SWITCH, "enable_mixed_sampler", "sampler_type", *SLEEP_ARGS})
# What the PyTorch backend returns for SamplingParams.logprobs=k (PRs #6097, #7756, #9374):
SAMPLED_ONLY = "sampled"  # 1.0: the sampled token's logprob only, whatever k
TOPK_MAY_MISS = "topk"  # 1.1: the top k, which may leave the sampled token out
TOPK_WITH_SAMPLED = "topk+sampled"  # 1.2 on: the top k and the sampled token


@dataclass(frozen=True)
class ReleaseLine:
    """What one release line has, from its source."""

    name: str  # "1.0" | "1.1" | "1.2" | "main"
    tensorrt_backend: bool  # trtllm-build, tensorrt_llm._tensorrt_engine, TrtLlmArgs
    serve_backends: tuple[str, ...]  # `trtllm-serve --backend` values it accepts, aliases included
    torch_args: frozenset[str]  # the release-specific TorchLlmArgs fields trtserve cares about
    evidence: str  # where that was read
    torch_logprobs: str = TOPK_WITH_SAMPLED  # SAMPLED_ONLY | TOPK_MAY_MISS | TOPK_WITH_SAMPLED
    # Speculative decoding's acceptance on the PyTorch backend (spec_counts.py reads it):
    # iteration stats' specDecodingStats filled by PyExecutor._update_iter_stats (PR #9855)
    spec_iteration_stats: bool = True
    # CompletionOutput.request_perf_metrics.speculative_decoding filled (SamplingParams.return_perf_metrics)
    spec_request_metrics: bool = False
    # llmapi KvCacheConfig.tokens_per_block: the PyTorch backend's KV block size (default 32). Read in the
    # llm_args.py that still has speculative_model_dir and DecodingBaseConfig.from_dict (placed as 1.1) and
    # in later ones; 1.0's KvCacheConfig has no such field
    kv_tokens_per_block: bool = True
    # CacheTransceiverConfig.backend's spelling (a Literal): lower case in 1.0's llm_args.py, upper case from
    # the 1.1 line on (read in both)
    transceiver_default: str = "DEFAULT"


RELEASES: dict[str, ReleaseLine] = {
    r.name: r
    for r in (
        ReleaseLine(
            "1.0",
            True,
            ("pytorch", "trt", "_autodeploy"),  # PR #7829 renamed trt -> tensorrt after 1.0 was cut
            frozenset({SAMPLER_SWITCH, "enable_mixed_sampler"}),
            "v1.0 source: llmapi/llm_args.py, commands/serve.py, _torch/pyexecutor/_util.py",
            SAMPLED_ONLY,  # PR #6097: top-k logprobs on the TensorRT path only
            # _torch/pyexecutor/py_executor.py _update_iter_stats fills specdec_stats from PR #9855 on
            # (merged 2025-12, placed by date, not read at the tag); the perf-metrics section stays zero
            spec_iteration_stats=False,
            kv_tokens_per_block=False,
            transceiver_default="default",
        ),
        ReleaseLine(
            "1.1",
            True,
            ("pytorch", "tensorrt", "_autodeploy"),  # not read in 1.1's source: PR #7829 (2025-09-18) predates it
            frozenset({"sampler_type", "enable_sleep"}),
            "v1.1 source: llmapi/llm_args.py (--backend inferred from PR #7829's date, not read)",
            TOPK_MAY_MISS,  # PR #7756 (top-k on PyTorch) is in, PR #9374 (sampled token always) is not
            spec_iteration_stats=False,  # PR #9855 (2025-12-10) is after release/1.1 was cut (placed by date)
        ),
        ReleaseLine(
            "1.2",
            True,
            ("pytorch", "tensorrt", "_autodeploy", "trt"),  # ChoiceWithAlias, trt -> tensorrt
            frozenset({"sampler_type", "enable_sleep"}),
            "v1.2.0/v1.2.1 source: llmapi/llm_args.py, commands/serve.py",
            # py_executor.py _update_iter_stats sums generation requests' drafts (PR #9855); per request
            # the perf-metrics section arrives zeroed: TorchSampler never calls
            # LlmRequest::updateNumTokensPerIteration, its only writer (PR #17082's root cause)
        ),
        ReleaseLine(
            "main",
            False,  # PR #15918 (July 2026) removed trtllm-build, _tensorrt_engine, TrtLlmArgs
            ("pytorch", "_autodeploy"),
            frozenset({"sleep_config"}),  # sampler_type removed too (PR #18232)
            "main after PR #15918 (1.3.0rc22 and later, 1.4.0rc*)",
            # executor/result.py GenerationResultBase._maybe_fill_spec_dec_perf_metrics backfills the
            # section from the executor's spec_dec_totals (PR #17082, merged 2026-07-31)
            spec_request_metrics=True,
        ),
    )
}
DEFAULT_LINE = "1.2"  # planned for when nothing is installed and no --trtllm-version is given: the newest release


@dataclass(frozen=True)
class Capabilities:
    """What a TensorRT-LLM has, as trtserve's decisions need it."""

    line: str  # the release line (a key of RELEASES)
    version: str | None  # the installed version; None when planned from the table
    how: str  # how this was established, one phrase (printed by the dry run and doctor)
    tensorrt_engine: bool  # tensorrt_llm._tensorrt_engine: runs TensorRT engines
    trtllm_build: bool  # trtllm-build: builds them
    serve_backends: tuple[str, ...]  # trtllm-serve --backend values, aliases included
    torch_args: frozenset[str]  # TorchLlmArgs fields: all of them when introspected, else what the table knows
    trt_args: frozenset[str]  # TrtLlmArgs fields (empty without the TensorRT backend)
    introspected: bool = False  # the *_args sets are complete: any other key would be refused
    lora_fields: frozenset[str] = LORA_FIELDS  # LoraConfig's fields (introspected, else those of every release)
    torch_logprobs: str = TOPK_WITH_SAMPLED  # what the PyTorch backend returns for logprobs=k (the table's)
    spec_iteration_stats: bool = True  # speculative-decoding acceptance in iteration stats (the table's)
    spec_request_metrics: bool = False  # ... and per request in its perf metrics (the table's)
    kv_tokens_per_block: bool = True  # KvCacheConfig.tokens_per_block (introspected, else the table's)
    kv_cache_fields: frozenset[str] | None = None  # KvCacheConfig's fields when introspected (None: unknown)
    transceiver_default: str = "DEFAULT"  # cache_transceiver_config.backend for its default (the table's)

    @property
    def sleep_arg(self) -> str | None:
        """The LLM argument that makes sleep / wake-up available on the PyTorch backend; None: no such thing."""
        return next((a for a in SLEEP_ARGS if a in self.torch_args), None)

    @property
    def label(self) -> str:
        installed = f"TensorRT-LLM {self.version}, " if self.version else "TensorRT-LLM "
        return f"{installed}release line {self.line} ({self.how})"

    def llm_args(self, backend: str) -> frozenset[str]:
        """The LLM-args fields of the LLM class that serves `backend` ("trtllm" or "tensorrt")."""
        return self.torch_args if backend == "trtllm" else self.trt_args


def release_line(version: str) -> str:
    """The RELEASES key of a version string ("1.2.1", "1.3.0rc22", "main"); UserError before 1.0."""
    if version == "main":
        return "main"
    m = re.match(r"^(\d+)\.(\d+)", version)
    if m is None:
        raise UserError(f"{version!r} is not a TensorRT-LLM version; give a release as X.Y (1.0, 1.1, 1.2) or main")
    major, minor = int(m[1]), int(m[2])
    if (major, minor) < (1, 0):
        raise UserError(
            f"TensorRT-LLM {version} is older than 1.0, the first release trtserve supports (its LLM API "
            "with the PyTorch backend); use TensorRT-LLM 1.0 or later"
        )
    if (major, minor) >= (1, 3):
        return "main"  # 1.3.0 and later were released without the TensorRT backend
    return f"{major}.{minor}"


def from_table(line: str, version: str | None, how: str) -> Capabilities:
    r = RELEASES[line]
    return Capabilities(
        line=line,
        version=version,
        how=how,
        tensorrt_engine=r.tensorrt_backend,
        trtllm_build=r.tensorrt_backend,
        serve_backends=r.serve_backends,
        torch_args=TORCH_ARGS | r.torch_args,
        trt_args=TRT_ARGS if r.tensorrt_backend else frozenset(),
        torch_logprobs=r.torch_logprobs,
        spec_iteration_stats=r.spec_iteration_stats,
        spec_request_metrics=r.spec_request_metrics,
        kv_tokens_per_block=r.kv_tokens_per_block,
        transceiver_default=r.transceiver_default,
    )


def planned(version: str) -> Capabilities:
    """A release that need not be installed (`--trtllm-version X.Y`), from the release table."""
    line = release_line(version)
    return from_table(line, None, f"from --trtllm-version {version} and the release table")


def installed() -> Capabilities | None:
    """The installed TensorRT-LLM from its distribution metadata (nothing imported); None if absent."""
    from importlib import metadata

    try:
        dist = metadata.distribution("tensorrt_llm")
    except metadata.PackageNotFoundError:
        return None
    version = dist.version
    line = release_line(version)
    caps = from_table(line, version, "installed; its metadata read, not imported")
    files = [str(f).replace("\\", "/") for f in (dist.files or [])]
    if not files:  # no RECORD: nothing to read beyond the version
        return caps
    tensorrt = any(f.startswith("tensorrt_llm/_tensorrt_engine/") for f in files)
    scripts = {ep.name for ep in dist.entry_points if ep.group == "console_scripts"}
    return _with_tensorrt(caps, tensorrt, "trtllm-build" in scripts)


def probe(tllm: ModuleType, *, serve_cli: bool = False) -> Capabilities:
    """The imported TensorRT-LLM, introspected; the table fills only what cannot be read.

    serve_cli: also read trtllm-serve's --backend choices from its click command (an import of the
    whole OpenAI server); otherwise they are the table's, less the TensorRT backend where it is absent.
    """
    version = str(getattr(tllm, "__version__", "") or "unknown")
    line = release_line(version)
    caps = from_table(line, version, "installed, introspected")
    torch_args = _model_fields(tllm, "TorchLlmArgs")
    trt_args = _model_fields(tllm, "TrtLlmArgs")
    tensorrt = _has_module(f"{tllm.__name__}._tensorrt_engine")
    caps = _with_tensorrt(caps, tensorrt, _has_module(f"{tllm.__name__}.commands.build"))
    serve = _serve_backend_choices(tllm) if serve_cli else None
    lora_fields = _lora_fields(tllm)
    kv_fields = _model_fields(tllm, "KvCacheConfig")
    return replace(
        caps,
        kv_cache_fields=kv_fields,
        kv_tokens_per_block="tokens_per_block" in kv_fields if kv_fields is not None else caps.kv_tokens_per_block,
        lora_fields=lora_fields if lora_fields is not None else caps.lora_fields,
        serve_backends=serve if serve is not None else caps.serve_backends,
        torch_args=torch_args if torch_args is not None else caps.torch_args,
        trt_args=trt_args if trt_args is not None else caps.trt_args,
        introspected=torch_args is not None and (trt_args is not None or not tensorrt),
    )


def _with_tensorrt(caps: Capabilities, tensorrt_engine: bool, trtllm_build: bool) -> Capabilities:
    """Caps with the TensorRT backend as found (the table's row may say otherwise: 1.3.0rc0-rc15)."""
    serve = caps.serve_backends
    if tensorrt_engine and not any(b in serve for b in ("tensorrt", "trt")):
        serve = (*serve, "tensorrt")
    if not tensorrt_engine:
        serve = tuple(b for b in serve if b not in ("tensorrt", "trt"))
    trt_args = caps.trt_args or (TRT_ARGS if tensorrt_engine else frozenset())
    return replace(
        caps,
        tensorrt_engine=tensorrt_engine,
        trtllm_build=trtllm_build,
        serve_backends=serve,
        trt_args=trt_args if tensorrt_engine else frozenset(),
    )


def _has_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _model_fields(tllm: ModuleType, cls: str) -> frozenset[str] | None:
    """Field names of `tensorrt_llm.llmapi.llm_args.<cls>` (pydantic, extra="forbid" in every 1.x)."""
    import importlib

    try:
        module = importlib.import_module(f"{tllm.__name__}.llmapi.llm_args")
    except ImportError:
        return None
    model = getattr(module, cls, None)
    fields = getattr(model, "model_fields", None)
    return frozenset(fields) if isinstance(fields, dict) else None


def lora_classes(tllm: ModuleType) -> tuple[type | None, type | None]:
    """(LoraConfig, LoRARequest) of this TensorRT-LLM: exported by llmapi (main), else where 1.0-1.2's
    own examples import them from (lora_manager, executor.request)."""
    import importlib

    found: list[type | None] = []
    for name, fallback in (("LoraConfig", "lora_manager"), ("LoRARequest", "executor.request")):
        cls = None
        for module in ("llmapi", fallback):
            try:
                cls = getattr(importlib.import_module(f"{tllm.__name__}.{module}"), name, None)
            except ImportError:
                cls = None
            if cls is not None:
                break
        found.append(cls)
    return found[0], found[1]


def _lora_fields(tllm: ModuleType) -> frozenset[str] | None:
    """LoraConfig's field names: a dataclass in 1.0-1.2, a pydantic model on main."""
    import dataclasses

    cls = lora_classes(tllm)[0]
    if cls is None:
        return None
    if dataclasses.is_dataclass(cls):
        return frozenset(f.name for f in dataclasses.fields(cls))
    fields = getattr(cls, "model_fields", None)
    return frozenset(fields) if isinstance(fields, dict) else None


def _serve_backend_choices(tllm: ModuleType) -> tuple[str, ...] | None:
    """`trtllm-serve --backend` choices (with ChoiceWithAlias' aliases) from its click command."""
    import importlib

    try:
        module = importlib.import_module(f"{tllm.__name__}.commands.serve")
    except Exception:  # noqa: BLE001 - optional introspection; the table answers instead
        return None
    for name in ("serve", "main"):
        command = getattr(module, name, None)
        command = getattr(command, "commands", {}).get("serve", command)  # a group holding `serve`
        for param in getattr(command, "params", []):
            choices = getattr(param.type, "choices", None) if param.name == "backend" else None
            if choices:
                return (*choices, *getattr(param.type, "aliases", {}))
    return None


def for_planning(version: str | None) -> Capabilities:
    """What a `--backend tensorrt|trtllm` build plans for: `--trtllm-version` if given, else the
    installed TensorRT-LLM (its metadata), else the newest release line of the table."""
    if version:
        return planned(version)
    found = installed()
    if found is not None:
        return found
    how = "the default, as TensorRT-LLM is not installed here; --trtllm-version X.Y plans for another"
    return from_table(DEFAULT_LINE, None, how)
