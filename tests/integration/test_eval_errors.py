"""Bad input to `trtserve eval`: one `error:` line and exit code 2, never a traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from helpers import make_hf_model

from trtserve.cli import main


def expect_error(fragment: str, *args) -> None:
    result = CliRunner().invoke(main, ["eval", *map(str, args)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit), result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines[-1].startswith(("error: ", "Error: ")), result.output
    assert fragment in lines[-1], result.output


@pytest.fixture(scope="module")
def other_vocab_engine(tmp_path_factory):
    """The tiny Llama's tokenizer with a larger embedding table: its logits index other tokens."""
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    src = make_hf_model(tmp_path_factory.mktemp("hf") / "wide", "llama", vocab_size=384)
    out = tmp_path_factory.mktemp("engines") / "wide"
    build_engine(BuildConfig(model=str(src), tokens_per_block=16), out, quiet=True)
    return out


@pytest.fixture(scope="module")
def other_tokenizer_engine(tmp_path_factory, tiny_llama):
    """The tiny Llama with two of its tokenizer's ids swapped: same vocabulary size, other tokens."""
    import json
    import shutil

    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    src = tmp_path_factory.mktemp("hf") / "swapped"
    shutil.copytree(tiny_llama, src)
    tok = json.loads((src / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[100:102]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (src / "tokenizer.json").write_text(json.dumps(tok))
    out = tmp_path_factory.mktemp("engines") / "swapped"
    build_engine(BuildConfig(model=str(src), tokens_per_block=16), out, quiet=True)
    return out


def test_reference_with_another_tokenizer(tiny_llama_engine, other_tokenizer_engine):
    expect_error("has a different tokenizer", tiny_llama_engine, "--reference", other_tokenizer_engine)


def test_missing_engine_dir(tmp_path):
    expect_error("does not exist; build one with `trtserve build", tmp_path / "nope")


def test_not_an_engine_dir(tmp_path):
    expect_error("is not a trtserve engine dir", tmp_path)


def test_missing_reference(tmp_path, tiny_llama_engine):
    expect_error(f"{tmp_path / 'ref'} does not exist", tiny_llama_engine, "--reference", tmp_path / "ref")


def test_reference_with_another_vocab(tiny_llama_engine, other_vocab_engine):
    expect_error("vocabulary of 384 tokens", tiny_llama_engine, "--reference", other_vocab_engine)
    expect_error("vocabulary of 320 tokens", other_vocab_engine, "--reference", tiny_llama_engine)


def test_empty_data(tmp_path, tiny_llama_engine):
    (tmp_path / "empty.txt").write_text(" \n\n")
    expect_error("holds no text", tiny_llama_engine, "--data", tmp_path / "empty.txt")


def test_one_token_of_data(tmp_path, tiny_llama_engine):
    (tmp_path / "short.txt").write_text("a")
    expect_error("only 1 token long; perplexity needs at least 2", tiny_llama_engine, "--data", tmp_path / "short.txt")


def test_missing_data_file(tmp_path, tiny_llama_engine):
    expect_error("does not exist", tiny_llama_engine, "--data", tmp_path / "nope.txt")


def test_binary_data(tmp_path, tiny_llama_engine):
    (tmp_path / "blob.txt").write_bytes(b"\xff\xfe\x00\x81 not text")
    expect_error("is not UTF-8 text", tiny_llama_engine, "--data", tmp_path / "blob.txt")


@pytest.mark.parametrize(
    "body,fragment",
    [
        ('{"text": "fine"}\n{"text": "also fine"\n', "d.jsonl:2 is not valid JSON"),
        ('{"text": "fine"}\n\n{"content": "x"}\n', 'd.jsonl:3 has no string "text" field'),
        ('["text"]\n', 'd.jsonl:1 has no string "text" field'),
        ('{"text": 5}\n', 'd.jsonl:1 has no string "text" field'),
        ('{"text": ""}\n', "holds no text"),
    ],
)
def test_bad_jsonl(tmp_path, tiny_llama_engine, body, fragment):
    (tmp_path / "d.jsonl").write_text(body)
    expect_error(fragment, tiny_llama_engine, "--data", tmp_path / "d.jsonl")


@pytest.mark.parametrize(
    "flags,fragment",
    [
        (["--seq-len", "257"], "--seq-len 257 exceeds the engine's max_seq_len (256)"),
        (["--seq-len", "32", "--stride", "33"], "--stride 33 must lie in [1, --seq-len 32]"),
        (["--seq-len", "1"], "'--seq-len': 1 is not in the range x>=2"),
        (["--stride", "0"], "'--stride': 0 is not in the range x>=1"),
        (["--max-tokens", "1"], "'--max-tokens': 1 is not in the range x>=2"),
        (["--threads", "0"], "'--threads': 0 is not in the range x>=1"),
    ],
)
def test_bad_flags(tiny_llama_engine, flags, fragment):
    expect_error(fragment, tiny_llama_engine, *flags)
