"""Guided decoding and logit_bias on the TensorRT-LLM adapter: mapped onto GuidedDecodingParams'
fields (json, json_object, regex, grammar) when the LLM has a guided_decoding_backend, else a 400."""

from __future__ import annotations

import json

import pytest

from trtserve.backends.tensorrt_llm.sampling import check_supported, guided_decoding_kwargs, to_trtllm_sampling
from trtserve.engine.errors import UserError
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.sampling import GuidedDecoding, SamplingParams

SCHEMA = json.dumps({"type": "object"})


@pytest.mark.parametrize(
    "guide, kwargs",
    [
        (GuidedDecoding(kind="json_schema", spec=SCHEMA), {"json": SCHEMA}),
        (GuidedDecoding(kind="json_object"), {"json_object": True}),
        (GuidedDecoding(kind="regex", spec="[0-9]+"), {"regex": "[0-9]+"}),
        (GuidedDecoding(kind="grammar", spec='root ::= "a"'), {"grammar": 'root ::= "a"'}),
        (GuidedDecoding(kind="choice", spec='["yes", "no"]'), {"grammar": 'root ::= "yes" | "no"'}),
    ],
)
def test_each_kind_maps_onto_one_field(guide, kwargs):
    assert guided_decoding_kwargs(guide) == kwargs
    params = SamplingParams(guided=guide)
    assert to_trtllm_sampling(params, [2])["guided_decoding"] == kwargs
    check_supported(GenerateRequest([1, 2], params), guided_backend="xgrammar")


def test_refused_without_a_guided_backend_and_logit_bias_always():
    req = GenerateRequest([1, 2], SamplingParams(guided=GuidedDecoding(kind="regex", spec="a")))
    with pytest.raises(UserError, match="guided_decoding_backend: xgrammar"):
        check_supported(req)
    with pytest.raises(UserError, match="logit_bias"):
        check_supported(GenerateRequest([1, 2], SamplingParams(logit_bias={3: 1.0})), guided_backend="xgrammar")
    assert "guided_decoding" not in to_trtllm_sampling(SamplingParams(), [2])
