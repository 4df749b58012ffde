"""What a tensor model's config.pbtxt says about the pooling routes (serve/tensors/pooling.py,
docs/pooling.md "Tensor models"): a declared classifier or cross-encoder, an embedder without
parameters, nothing for other models, and one sentence for inconsistent parameters."""

from __future__ import annotations

import pytest

from trtserve.serve.tensors.pooling import TensorPoolingSpec
from trtserve.tensor.config import parse_config

BYTES = "data_type: TYPE_STRING dims: [ 1 ]"


def _config(tmp_path, inputs: list[str], outputs: str, params: dict[str, str]):
    ins = ",\n".join(f'{{ name: "{n}" {BYTES} }}' for n in inputs)
    ps = "\n".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in params.items())
    text = f'name: "m"\nbackend: "onnxruntime"\nmax_batch_size: 8\ninput [ {ins} ]\noutput [ {outputs} ]\n{ps}\n'
    return parse_config(text, "m", tmp_path)


LOGITS1 = '{ name: "logits" data_type: TYPE_FP32 dims: [ 1 ] }'
LOGITS3 = '{ name: "logits" data_type: TYPE_FP32 dims: [ 3 ] }'


def test_a_cross_encoder_scores_pairs(tmp_path):
    spec = TensorPoolingSpec.of(
        _config(
            tmp_path, ["query", "document"], LOGITS1, {"pooling_task": "classify", "text_pair_inputs": "query,document"}
        )
    )
    assert (spec.task, spec.output, spec.pair_inputs, spec.text_input) == (
        "classify",
        "logits",
        ("query", "document"),
        None,
    )
    assert spec.scores and spec.labels == ("LABEL_0",)


def test_a_three_label_classifier_does_not_score(tmp_path):
    spec = TensorPoolingSpec.of(
        _config(tmp_path, ["text"], LOGITS3, {"pooling_task": "classify", "text_input": "text"})
    )
    assert spec.labels == ("LABEL_0", "LABEL_1", "LABEL_2") and not spec.scores


def test_an_embedder_needs_no_parameters_and_other_models_pool_nothing(tmp_path):
    emb = TensorPoolingSpec.of(_config(tmp_path, ["text"], '{ name: "e" data_type: TYPE_FP32 dims: [ 8 ] }', {}))
    assert (emb.task, emb.text_input, emb.scores) == ("embed", "text", True)
    assert (
        TensorPoolingSpec.of(_config(tmp_path, ["text"], LOGITS3 + ", " + LOGITS1.replace("logits", "b"), {})) is None
    )


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"pooling_task": "rank"}, "pooling_task is 'rank'"),
        ({"pooling_task": "classify"}, "needs text_input, text_pair_inputs or both"),
        ({"pooling_task": "classify", "text_input": "nope"}, "must be a BYTES input"),
        ({"pooling_task": "classify", "text_pair_inputs": "text"}, "must name two BYTES inputs"),
    ],
)
def test_inconsistent_parameters_are_one_sentence(tmp_path, params, message):
    with pytest.raises(ValueError, match=message):
        TensorPoolingSpec.of(_config(tmp_path, ["text"], LOGITS1, params))
