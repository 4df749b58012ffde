"""engine/tokenizer.py on SmolLM2's tokenizer (the demo engine's, saved from its GGUF as `trtserve build`
saves it) equals transformers' AutoTokenizer; tests/unit/test_tokenizer.py has the offline ones."""

from __future__ import annotations

import pytest
from tokenizer_checks import check_same_as_hf, old_eos_ids

from trtserve.engine.rules import load_tokenizer


@pytest.fixture(scope="module")
def smol_dir(tmp_path_factory):
    from trtserve.build.gguf_reader import GGUFReader
    from trtserve.build.source import resolve_alias

    d = tmp_path_factory.mktemp("smollm2-tokenizer")
    GGUFReader(resolve_alias("smollm2-135m")).save_tokenizer(d)
    return d


@pytest.mark.demo
def test_smollm2_tokenizer_equals_transformers(smol_dir):
    check_same_as_hf(smol_dir)


@pytest.mark.demo
def test_smollm2_eos_ids_equal_the_transformers_loader(smol_dir):
    assert load_tokenizer(smol_dir)[1] == old_eos_ids(smol_dir)
