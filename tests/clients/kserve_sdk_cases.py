"""The KServe Python SDK (`kserve.InferenceRESTClient`, `kserve.InferenceGRPCClient`) against a
live server, as KServe's docs show: health, model readiness and an infer whose text equals HTTP
generate's greedy text."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest
from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig

pytestmark = pytest.mark.timeout(300)
TIMEOUT_S = 60.0  # every client call's limit: a server that stopped answering fails the test
PROMPT = "The quick brown fox"


def _generate(server, model: str, prompt: str, n: int) -> str:
    """HTTP generate, greedy and without the prompt: the reference text."""
    body = {"text_input": prompt, "max_tokens": n, "exclude_input_in_output": True}
    r = httpx.post(f"{server.url}/v2/models/{model}/generate", json=body, timeout=TIMEOUT_S)
    assert r.status_code == 200, r.text
    return r.json()["text_output"]


def _request(model: str, n: int, binary: bool = False) -> InferRequest:
    """text_input BYTES [1], max_tokens INT32 [1], exclude_input_in_output BOOL [1] (the ensemble's names)."""
    if binary:  # numpy data: the REST client sends it with the binary tensor data extension
        text = InferInput("text_input", [1], "BYTES")
        text.set_data_from_numpy(np.array([PROMPT.encode()], dtype=np.object_), binary_data=True)
        tokens = InferInput("max_tokens", [1], "INT32")
        tokens.set_data_from_numpy(np.array([n], dtype=np.int32), binary_data=True)
    else:
        text = InferInput("text_input", [1], "BYTES", data=[PROMPT])
        tokens = InferInput("max_tokens", [1], "INT32", data=[n])
    exclude = InferInput("exclude_input_in_output", [1], "BOOL", data=[True])
    return InferRequest(model_name=model, infer_inputs=[text, tokens, exclude])


def _text(response) -> str:
    out = response.get_output_by_name("text_output")
    assert out is not None and out.datatype == "BYTES", response
    value = out.as_numpy().reshape(-1)[0]
    return value.decode() if isinstance(value, bytes) else value


def test_rest_client_health_and_infer(server, model_name):
    want = _generate(server, model_name, PROMPT, 6)

    async def run():
        async with InferenceRESTClient(RESTConfig(protocol="v2", timeout=TIMEOUT_S, retries=0)) as c:
            assert await c.is_server_live(server.url) is True
            assert await c.is_server_ready(server.url) is True
            assert await c.is_model_ready(server.url, model_name) is True
            assert await c.is_model_ready(server.url, "no-such-model") is False
            json_out = await c.infer(server.url, _request(model_name, 6), model_name=model_name)
            binary_out = await c.infer(server.url, _request(model_name, 6, binary=True), model_name=model_name)
            return json_out, binary_out

    json_out, binary_out = asyncio.run(run())
    assert json_out.model_name == model_name
    assert _text(json_out) == want and _text(binary_out) == want


def test_rest_client_sees_a_wrong_datatype_as_an_error(server, model_name):
    bad = InferRequest(
        model_name=model_name,
        infer_inputs=[
            InferInput("text_input", [1], "BYTES", data=[PROMPT]),
            InferInput("max_tokens", [1], "FP32", data=[6.0]),  # the model's metadata says INT32
        ],
    )

    async def run():
        async with InferenceRESTClient(RESTConfig(protocol="v2", timeout=TIMEOUT_S, retries=0)) as c:
            with pytest.raises(httpx.HTTPStatusError) as err:
                await c.infer(server.url, bad, model_name=model_name)
            return err.value.response

    response = asyncio.run(run())
    assert response.status_code == 400 and "max_tokens" in response.json()["error"]


def test_grpc_client_health_and_infer(server, model_name):
    want = _generate(server, model_name, PROMPT, 6)

    async def run():
        async with InferenceGRPCClient(server.grpc, timeout=TIMEOUT_S, retries=0) as c:
            assert await c.is_server_live() is True
            assert await c.is_server_ready() is True
            assert await c.is_model_ready(model_name) is True
            return await c.infer(_request(model_name, 6))

    out = asyncio.run(run())
    assert out.model_name == model_name
    assert _text(out) == want
