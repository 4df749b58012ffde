"""`trtserve run` and `trtserve inspect` report the same KV cache for the same budget."""

from __future__ import annotations

import json

from click.testing import CliRunner

from trtserve.cli import main


def test_run_logs_the_blocks_inspect_reports(server, tiny_llama_engine):
    result = CliRunner().invoke(main, ["inspect", str(tiny_llama_engine), "--kv-cache-memory", "64MiB", "--json"])
    assert result.exit_code == 0, result.output
    blocks = json.loads(result.output)["kv_blocks"]
    assert blocks == 64 * 2**20 // (512 * 16)  # 512 bytes a token, blocks of 16 tokens
    line = next(x for x in server.log.read_text().splitlines() if "KV cache:" in x)
    assert f"KV cache: {blocks} blocks of 16 tokens" in line and "the kv_cache_memory given" in line
