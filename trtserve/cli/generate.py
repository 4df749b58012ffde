"""`trtserve generate ENGINE_DIR PROMPT...`: offline generation, for demos and smoke checks."""

from __future__ import annotations

from pathlib import Path

import click

from trtserve.cli.kv_offload import kv_cache_dtype_option
from trtserve.cli.speculative import merged, speculative_options


@click.command("generate")
@click.argument("engine_dir", type=click.Path(path_type=Path))
@click.argument("prompts", nargs=-1, required=True)
@click.option("--max-tokens", default=64, show_default=True, type=click.IntRange(1))
@click.option("--temperature", default=0.0, show_default=True, type=click.FloatRange(0.0))
@click.option("--top-p", default=1.0, show_default=True, type=click.FloatRange(0.0, 1.0, min_open=True))
@click.option("--top-k", default=0, show_default=True, type=click.IntRange(0))
@click.option("--seed", type=int)
@click.option("--chat/--no-chat", default=True, show_default=True, help="Apply the engine's chat template.")
@click.option("--kv-cache-memory", help="KV-cache budget, e.g. 1GiB [what the prompts need].")
@kv_cache_dtype_option
@speculative_options
def command(
    engine_dir: Path,
    prompts: tuple[str, ...],
    chat: bool,
    kv_cache_memory: str | None,
    kv_cache_dtype: str | None,
    speculative: str | None,
    speculative_tokens: int | None,
    **params,
) -> None:
    """Generate a reply to each PROMPT with the torch engine."""
    from trtserve.build.inspect import parse_memory
    from trtserve.engine.sampling import SamplingParams
    from trtserve.llm import LLM

    budget = parse_memory(kv_cache_memory, "--kv-cache-memory") if kv_cache_memory else None
    llm = LLM(
        engine_dir,
        kv_cache_memory=budget,
        kv_cache_dtype=kv_cache_dtype or "auto",
        speculative=merged(None, speculative, speculative_tokens),
    )
    for prompt, out in zip(prompts, llm.generate(list(prompts), SamplingParams(**params), chat=chat), strict=True):
        click.echo(
            f">>> {prompt}\n{out.text.strip()}\n[{len(out.token_ids)} tokens, finish_reason={out.finish_reason}]"
        )
