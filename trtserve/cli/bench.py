"""`trtserve bench`: load-test an OpenAI-compatible, KServe or Triton gRPC endpoint (this server or another),
serving an LLM or a tensor model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from trtserve.engine.errors import UserError

DATASETS = ("random", "sharegpt", "shared-prefix")


def _length(value: str, flag: str) -> int | tuple[int, int]:
    """`N` or `LO:HI` (inclusive) -> int or (lo, hi)."""
    try:
        parts = [int(p) for p in value.split(":")]
    except ValueError:
        parts = []
    if len(parts) == 1 and parts[0] >= 1:
        return parts[0]
    if len(parts) == 2 and 1 <= parts[0] <= parts[1]:
        return parts[0], parts[1]
    raise UserError(f"{flag} {value!r} is not a length; give a positive integer N or a range LO:HI with LO <= HI")


def _slo(value: str | None) -> dict[str, float]:
    """`ttft=500,tpot=50` -> {"ttft": 500.0, "tpot": 50.0} (milliseconds)."""
    from trtserve.bench.stats import SLO_KEYS

    out: dict[str, float] = {}
    for item in filter(None, (value or "").split(",")):
        key, _, ms = item.partition("=")
        try:
            limit = float(ms)
        except ValueError:
            limit = -1.0
        if key.strip() not in SLO_KEYS or not limit > 0 or not math.isfinite(limit):
            raise UserError(
                f"--slo item {item!r} is not valid; write NAME=MS with NAME one of {', '.join(SLO_KEYS)} "
                "and MS a positive number of milliseconds, e.g. --slo ttft=500,tpot=50"
            )
        out[key.strip()] = limit
    return out


def _workload(dataset: str, n: int, input_len, output_len, vocab: int, seed: int, prefix: dict):
    from trtserve.bench import workload

    if dataset == "random":
        return workload.random_requests(n, input_len, output_len, vocab, seed)
    if dataset == "sharegpt":
        total = prefix["max_total_len"]
        return workload.sharegpt_like(n, vocab, seed, max_input_len=min(1024, total - 4), max_total_len=total)
    k, m = prefix["num_prefixes"], math.ceil(n / prefix["num_prefixes"])
    reqs = workload.shared_prefix(k, m, prefix["prefix_len"], prefix["question_len"], output_len, vocab, seed)
    return reqs[:n]


def _served_max_len(base_url: str, model: str, api_key: str | None) -> int | None:
    """The server's `max_model_len` from /v1/models (trtserve and vLLM report it), if it says."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        cards = httpx.get(base_url.rstrip("/") + "/v1/models", headers=headers, timeout=10).json().get("data", [])
        lens = [c.get("max_model_len") for c in cards if c.get("id") == model]
        return int(lens[0]) if lens and lens[0] else None
    except (httpx.HTTPError, ValueError, AttributeError, TypeError):
        return None


def _tokenizer(path: Path | None):
    if path is None:
        return None
    from transformers import AutoTokenizer

    if (path / "tokenizer").is_dir():  # a trtserve engine directory
        path = path / "tokenizer"

    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as err:
        raise UserError(
            f"--tokenizer {path} has no tokenizer transformers can load ({err}); give its directory"
        ) from None


def _floor(engine_dir: Path, run) -> dict:
    """The run's compute floor (trtserve/bench/floor.py); the GEMM rate is measured now, after the run,
    with the thread count the server's engine uses by default (torch's)."""
    from trtserve.bench import floor
    from trtserve.engine.layout import read_engine_config

    cfg = read_engine_config(engine_dir).pretrained_config  # UserError-derived: a clear message if not an engine
    f = floor.of_run(cfg, run, floor.measure_gemm_rate(cfg))
    return f.as_dict() | {"line": f.line()}


# Flags of the LLM workload: refused for a tensor model rather than silently ignored.
LLM_ONLY = (
    "request_rate", "burstiness", "dataset", "input_len", "output_len", "num_prefixes", "prefix_len",
    "question_len", "max_total_len", "vocab_size", "tokenizer", "ignore_eos", "slo", "floor_engine", "stream",
)  # fmt: skip
TENSOR_ONLY = ("concurrency", "shape", "input_files")


def _levels(o: dict) -> list[int]:
    """--concurrency 1,8,32 (else --max-concurrency, else 1)."""
    if o["concurrency"] is None:
        return [o["max_concurrency"] or 1]
    try:
        levels = [int(c) for c in o["concurrency"].split(",")]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise UserError(f"--concurrency {o['concurrency']!r} is not valid; give positive integers, e.g. 1,8,32")
    return levels


def _given(names: tuple[str, ...]) -> list[str]:
    ctx = click.get_current_context()
    flags = {p.name: p.opts[0] for p in ctx.command.params}
    return [flags[n] for n in names if ctx.get_parameter_source(n) != click.core.ParameterSource.DEFAULT]


def _bench_tensor(o: dict) -> bool:
    """Bench `--model` as a tensor model if it is one (trtserve/bench/tensor.py); False for an LLM."""
    import asyncio

    from rich.console import Console

    from trtserve.bench.report import tensor_table
    from trtserve.bench.tensor import bench_if_tensor
    from trtserve.bench.tensor_inputs import parse_input_files, parse_shapes

    if o["backend"] not in ("kserve", "grpc"):
        return False
    levels, shapes, files = _levels(o), parse_shapes(o["shape"]), parse_input_files(o["input_files"])

    def progress(level: dict) -> None:
        click.echo(f"concurrency {level['concurrency']}: {level['completed']} ok, {level['failed']} failed", err=True)

    def refuse_llm_flags() -> None:
        if given := _given(LLM_ONLY):
            raise UserError(
                f"{', '.join(given)}: LLM workload flags, and model {o['model']!r} is a tensor model; drop them"
            )

    url = o["base_url"] if o["backend"] == "kserve" else o["grpc_url"]
    summary = asyncio.run(
        bench_if_tensor(
            o["backend"], url, o["model"], levels, o["num_requests"], shapes=shapes, files=files, seed=o["seed"],
            timeout=o["timeout"], api_key=o["api_key"], progress=progress if o["progress"] else None,
            on_tensor=refuse_llm_flags,
        )
    )  # fmt: skip
    if summary is None:
        return False
    Console().print(tensor_table(summary))
    if errors := [e for level in summary["levels"] for e in level["errors"]]:
        click.echo(f"some requests failed; the first error: {errors[0]}", err=True)
    if o["json_path"] is not None:
        o["json_path"].write_text(json.dumps(summary, indent=2))
    return True


@click.command("bench")
@click.option(
    "--backend", type=click.Choice(["openai", "openai-chat", "kserve", "grpc"]), default="openai", show_default=True
)
@click.option(
    "--base-url", default="http://127.0.0.1:8000", show_default=True, help="The server's root URL (grpc: its /metrics)."
)
@click.option("--grpc-url", default="127.0.0.1:8001", show_default=True, help="grpc: the server's HOST:PORT.")
@click.option(
    "--stream/--no-stream",
    default=True,
    show_default=True,
    help="Stream tokens, or get each answer whole (kserve: /infer; grpc: ModelInfer; TTFT is then the latency).",
)
@click.option("--model", required=True, help="The served model name (OpenAI `model`, KServe model in the path).")
@click.option("--num-requests", "-n", default=100, show_default=True, type=click.IntRange(1))
@click.option("--request-rate", default="inf", show_default=True, help="Requests per second (Poisson/gamma), or inf.")
@click.option("--max-concurrency", type=click.IntRange(1), help="At most this many requests in flight.")
@click.option(
    "--burstiness",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0.0, min_open=True),
    help="Gamma shape of the arrival gaps: 1 Poisson, <1 burstier, >1 smoother.",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seeds the workload and the arrivals.")
@click.option("--dataset", type=click.Choice(DATASETS), default="random", show_default=True)
@click.option("--input-len", default="128", show_default=True, help="Prompt tokens: N or LO:HI (random).")
@click.option(
    "--output-len", default="128", show_default=True, help="Output tokens: N or LO:HI (random, shared-prefix)."
)
@click.option("--num-prefixes", default=4, show_default=True, type=click.IntRange(1), help="shared-prefix: K prefixes.")
@click.option(
    "--prefix-len", default=512, show_default=True, type=click.IntRange(1), help="shared-prefix: tokens each."
)
@click.option("--question-len", default="32", show_default=True, help="shared-prefix: question tokens, N or LO:HI.")
@click.option(
    "--max-total-len",
    type=click.IntRange(1),
    help="sharegpt: cap prompt + output tokens (default: the server's max_model_len, at most 2048).",
)
@click.option(
    "--vocab-size",
    default=256,
    show_default=True,
    type=click.IntRange(16),
    help="Random prompt ids are drawn from [10, vocab-size); the default is valid for any byte-level tokenizer.",
)
@click.option(
    "--tokenizer",
    type=click.Path(path_type=Path),
    help="A local tokenizer or trtserve engine dir: sets the vocab size and detokenizes prompts for openai-chat/kserve.",
)
@click.option(
    "--ignore-eos/--no-ignore-eos", default=True, show_default=True, help="Generate exactly --output-len tokens."
)
@click.option("--slo", help="Goodput SLOs in ms, e.g. ttft=500,tpot=50 (also e2el).")
@click.option("--api-key", envvar="TRTSERVE_API_KEY", help="Sent as a bearer token.")
@click.option(
    "--timeout",
    default=600.0,
    show_default=True,
    type=click.FloatRange(0.0, min_open=True),
    help="Seconds per request.",
)
@click.option(
    "--floor",
    "floor_engine",
    type=click.Path(path_type=Path),
    help="ENGINE_DIR the server runs: also report the compute floor (the workload's matmul FLOPs from its config at "
    "this machine's GEMM rate, measured after the run) and the fraction reached; meaningful when the server runs here.",
)
@click.option(
    "--concurrency",
    help="Tensor models: a sweep of closed-loop concurrency levels, e.g. 1,8,32 (default: --max-concurrency, or 1).",
)
@click.option(
    "--shape",
    multiple=True,
    help="Tensor models: NAME=D1xD2... an input's full shape (needed for a variable non-batch dim; batch dim else 1).",
)
@click.option(
    "--input",
    "input_files",
    multiple=True,
    help="Tensor models: NAME=FILE an input's data (a .npy array, or any file as one BYTES element) instead of random.",
)
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Also write the summary (vLLM keys) here.")
@click.option("--progress/--no-progress", default=True, show_default=True)
def command(**o) -> None:
    """Send a seeded workload to an endpoint and report throughput, TTFT, TPOT, ITL and goodput; for a tensor
    model (kserve / grpc), a concurrency sweep: throughput, latency and the server's average batch size."""
    import asyncio
    import logging

    from rich.console import Console

    from trtserve.bench.client import run_benchmark
    from trtserve.bench.report import table
    from trtserve.bench.stats import summarize

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request would bury the table
    if _bench_tensor(o):
        return
    if given := _given(TENSOR_ONLY):
        raise UserError(
            f"{', '.join(given)}: tensor-model flags, and model {o['model']!r} did not answer as a tensor model on "
            f"--backend {o['backend']} (an LLM, not served, or a backend other than kserve / grpc)"
        )
    try:
        rate = float(o["request_rate"])
    except ValueError:
        rate = -1.0
    if not rate > 0:
        raise UserError(
            f"--request-rate {o['request_rate']!r} is not valid; give a positive number of requests/s or inf"
        )
    slo = _slo(o["slo"])
    input_len, output_len = _length(o["input_len"], "--input-len"), _length(o["output_len"], "--output-len")
    prefix = {
        "num_prefixes": o["num_prefixes"],
        "prefix_len": o["prefix_len"],
        "question_len": _length(o["question_len"], "--question-len"),
        "max_total_len": o["max_total_len"],
    }
    if o["dataset"] == "sharegpt" and o["max_total_len"] is None:
        prefix["max_total_len"] = min(2048, _served_max_len(o["base_url"], o["model"], o["api_key"]) or 2048)
    if o["dataset"] == "sharegpt" and prefix["max_total_len"] < 12:
        raise UserError("--max-total-len must be at least 12 for the sharegpt dataset")
    tok = _tokenizer(o["tokenizer"])
    vocab = len(tok) if tok is not None else o["vocab_size"]
    if tok is None and o["backend"] != "openai":
        click.echo(
            f"note: {o['backend']} takes text, so the random token-id prompts are detokenized by the server and "
            "re-tokenized, which changes their length; pass --tokenizer (a tokenizer or engine dir) for exact lengths",
            err=True,
        )
    reqs = _workload(o["dataset"], o["num_requests"], input_len, output_len, vocab, o["seed"], prefix)
    run = asyncio.run(
        run_benchmark(
            o["base_url"],
            o["backend"],
            o["model"],
            reqs,
            request_rate=rate,
            max_concurrency=o["max_concurrency"],
            burstiness=o["burstiness"],
            seed=o["seed"],
            progress=o["progress"],
            ignore_eos=o["ignore_eos"],
            api_key=o["api_key"],
            tokenizer=tok,
            timeout=o["timeout"],
            stream=o["stream"],
            grpc_url=o["grpc_url"],
        )
    )
    summary = summarize(run, slo)
    errors = [e for e in summary["errors"] if e]
    if not summary["completed"]:
        raise UserError(f"all {len(errors)} requests failed; the first error: {errors[0]}")
    if o["floor_engine"] is not None:
        summary["floor"] = _floor(o["floor_engine"], run)
    Console().print(table(summary))
    if "floor" in summary:
        click.echo(summary["floor"].pop("line"))
    if errors:
        click.echo(f"{len(errors)} request(s) failed; the first error: {errors[0]}", err=True)
    if o["json_path"] is not None:
        o["json_path"].write_text(json.dumps(summary, indent=2))
