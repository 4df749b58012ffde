"""The streamed GGUF reader (build/gguf_file.py) against gguf-py's whole-file parse."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from helpers import make_hf_model, write_gguf
from test_build_errors import expect_error

from trtserve.build.gguf_file import GGUFFile, SkippedArray


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf")
    return write_gguf(make_hf_model(d / "hf", "llama"), d / "tiny.gguf")


def test_metadata_and_tensors_equal_gguf_py(tiny_gguf):
    ref = gguf.GGUFReader(str(tiny_gguf))
    ours = GGUFFile(tiny_gguf, keep_arrays=("tokenizer.ggml.tokens",))
    for key, field in ref.fields.items():
        if key.startswith("GGUF."):
            continue  # the header's own counts, not metadata
        value = ours.metadata[key]
        if isinstance(value, SkippedArray):
            assert value.length == len(field.data), key  # stepped over, not read
        else:
            assert value == field.contents(), key
    assert ours.metadata["tokenizer.ggml.tokens"] == ref.fields["tokenizer.ggml.tokens"].contents()
    assert isinstance(ours.metadata["tokenizer.ggml.merges"], SkippedArray)
    assert list(ours.tensors) == [t.name for t in ref.tensors]
    for t in ref.tensors:
        info = ours.tensors[t.name]
        assert (info.dims, info.ggml_type, info.offset) == (tuple(t.shape.tolist()), t.tensor_type, t.data_offset)
        assert np.array_equal(ours.read(info).view(t.data.dtype).reshape(t.data.shape), t.data)


def test_a_truncated_gguf_is_refused_by_name(tmp_path, tiny_gguf):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_gguf.read_bytes()[:-100])
    expect_error(tmp_path, "is not a readable GGUF file (tensor output_norm.weight lies past the end of the file", cut)
    head = tmp_path / "head.gguf"
    head.write_bytes(tiny_gguf.read_bytes()[:300])
    expect_error(tmp_path, "is not a readable GGUF file (the file ends inside its header", head)
