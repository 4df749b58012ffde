"""What a schema does not say: numeric edges, token ids outside the vocabulary, strings no tokenizer
likes, deep and huge bodies, wrong content types, binary tensors whose sizes lie. Each must be a
4xx with an error body (or a 200 where the value is valid), never a 5xx."""

from __future__ import annotations

import json
import struct

import pytest
from starlette.testclient import TestClient

VOCAB = 320  # tests/helpers.py
EDGES = [0, -1, 2**31 - 1, 2**31, 2**63, 2**64, "NaN", "Infinity", "-Infinity", 1e308]
OPENAI_NUMBERS = ["max_tokens", "n", "top_k", "top_p", "temperature", "seed", "min_tokens", "priority", "timeout"]
OPENAI_NUMBERS += ["presence_penalty", "repetition_penalty", "logprobs"]
KSERVE_NUMBERS = ["max_tokens", "top_k", "end_id", "pad_id", "num_return_sequences", "seed", "min_tokens"]
KSERVE_NUMBERS += ["temperature", "priority", "length_penalty", "beam_width"]


# Integer fields the engine uses as sizes or indices: int32 at most. (Seeds go to 2**64 - 1; floats
# such as priority may be large, only not NaN or infinite.)
INT32 = {"max_tokens", "n", "top_k", "min_tokens", "logprobs", "end_id", "pad_id", "num_return_sequences", "beam_width"}


def must_refuse(field: str, value) -> bool:
    if value == "NaN" or (value in ("Infinity", "-Infinity") and not (field == "timeout" and value == "Infinity")):
        return True
    return field in INT32 and value in (2**31, 2**63, 2**64)


@pytest.fixture(scope="module")
def client(fuzz_app):
    with TestClient(fuzz_app, raise_server_exceptions=False) as c:
        yield c


def raw(value) -> str:
    """JSON text for a value; NaN and the infinities as Python's json module writes and reads them."""
    return value if isinstance(value, str) else json.dumps(value)


def post(client, path: str, text: str, content_type: str = "application/json"):
    return client.post(path, content=text.encode("utf-8", "surrogatepass"), headers={"Content-Type": content_type})


def assert_refused_or_fine(r, path: str) -> None:
    assert r.status_code < 500, f"{path}: {r.status_code} {r.text[:300]}"
    if r.status_code >= 400:
        err = r.json()["error"]
        message = err if path.startswith("/v2") else err["message"]
        assert isinstance(message, str) and message


@pytest.mark.timeout(300)
@pytest.mark.parametrize("field", OPENAI_NUMBERS)
def test_openai_numbers_at_their_edges(client, model_name, field):
    for value in EDGES:
        extra = {"max_tokens": 2} if field != "max_tokens" else {}
        body = json.dumps({"model": model_name, "prompt": "Hi", **extra})[:-1] + f', "{field}": {raw(value)}}}'
        r = post(client, "/v1/completions", body)
        assert_refused_or_fine(r, "/v1/completions")
        if must_refuse(field, value):
            assert r.status_code == 400, f"{field}={value}: {r.status_code} {r.text[:200]}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("field", KSERVE_NUMBERS)
def test_kserve_numbers_at_their_edges(client, model_name, field):
    path = f"/v2/models/{model_name}/generate"
    for value in EDGES:
        extra = {"max_tokens": 2} if field != "max_tokens" else {}
        body = json.dumps({"text_input": "Hi", **extra})[:-1] + f', "{field}": {raw(value)}}}'
        r = post(client, path, body)
        assert_refused_or_fine(r, path)
        if must_refuse(field, value):
            assert r.status_code == 400, f"{field}={value}: {r.status_code} {r.text[:200]}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("bad", [VOCAB, 2**31 - 1, 2**31, -1, 2**63])
def test_token_ids_outside_the_vocabulary_are_400(client, model_name, bad):
    bodies = {
        "/v1/completions": [
            {"prompt": [1, 2, bad], "max_tokens": 2},
            {"prompt": [[1, 2], [bad]], "max_tokens": 2},
            {"prompt": "Hi", "max_tokens": 2, "stop_token_ids": [bad]},
            {"prompt": "Hi", "max_tokens": 2, "logit_bias": {str(bad): 1}},
        ],
        "/v1/chat/completions": [
            {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "stop_token_ids": [bad]},
        ],
        f"/v2/models/{model_name}/generate": [{"text_input": "Hi", "max_tokens": 2, "end_id": bad}],
        "/detokenize": [{"tokens": [1, bad]}],
    }
    for path, cases in bodies.items():
        for body in cases:
            if path.startswith("/v1/"):
                body["model"] = model_name
            r = client.post(path, json=body)
            if bad == -1 and "end_id" in body:
                assert r.status_code == 200  # -1 is TensorRT-LLM's "no end token"
                continue
            assert r.status_code == 400, f"{path} {body}: {r.status_code} {r.text[:200]}"


STRINGS = ["\u0000", "a\u0000b", "\ud800", "x\udfff", "\ud83d", "🙂" * 50, "\u202e\u200b", "\x1b[2J"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("text", STRINGS, ids=[f"s{i}" for i in range(len(STRINGS))])
def test_strings_no_tokenizer_likes(client, model_name, text):
    quoted = json.dumps(text)  # \uXXXX escapes: lone surrogates travel as JSON allows
    cases = {
        "/v1/completions": f'{{"model": "{model_name}", "prompt": {quoted}, "max_tokens": 2}}',
        "/v1/chat/completions": f'{{"model": "{model_name}", "max_tokens": 2, "messages": [{{"role": "user", "content": {quoted}}}]}}',
        "/tokenize": f'{{"model": "{model_name}", "prompt": {quoted}}}',
        f"/v2/models/{model_name}/generate": f'{{"text_input": {quoted}, "max_tokens": 2, "stop_words": [{quoted}]}}',
    }
    for path, body in cases.items():
        assert_refused_or_fine(post(client, path, body), path)


def infer(client, model_name: str, header: dict, blob: bytes, header_length: int | None = None):
    head = json.dumps(header).encode()
    length = len(head) if header_length is None else header_length
    return client.post(
        f"/v2/models/{model_name}/infer",
        content=head + blob,
        headers={"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(length)},
    )


def _text_input(size, datatype: str = "BYTES", shape=(1,)) -> dict:
    return {
        "inputs": [
            {"name": "text_input", "datatype": datatype, "shape": list(shape), "parameters": {"binary_data_size": size}}
        ]
    }


@pytest.mark.timeout(120)
def test_binary_tensors_whose_sizes_lie(client, model_name):
    hello = struct.pack("<I", 5) + b"Hello"
    cases = [
        (_text_input(len(hello) + 10), hello),  # declares more than sent
        (_text_input(len(hello) - 3), hello),  # declares less: bytes left over
        (_text_input(-1), hello),
        (_text_input("9"), hello),
        (_text_input(2**63), hello),
        (_text_input(len(hello)), struct.pack("<I", 2**31) + b"Hello"),  # element length lies
        (_text_input(2), b"\x05\x00"),  # truncated length prefix
        (_text_input(len(hello), shape=(3,)), hello),  # shape says 3 elements, 1 sent
        (_text_input(len(hello), shape=(2**62, 2**62)), hello),  # element count overflows int64
        (_text_input(len(hello), shape=(-1,)), hello),
        (_text_input(8, datatype="INT32"), b"\x00" * 7 + b"\x01"),
        (_text_input(len(hello), datatype="COMPLEX"), hello),
    ]
    for header, blob in cases:
        r = infer(client, model_name, header, blob)
        assert r.status_code == 400, f"{header}: {r.status_code} {r.text[:200]}"
    for length in (0, -5, 10**6, "abc"):
        r = infer(client, model_name, _text_input(len(hello)), hello, header_length=length)
        assert r.status_code == 400, f"header length {length}: {r.status_code} {r.text[:200]}"


@pytest.mark.timeout(120)
def test_invalid_utf8_in_a_bytes_tensor_is_400(client, model_name):
    for payload in (b"\xff\xfe", b"ab\xc3", b"\xed\xa0\x80", b"a\x00b"):
        blob = struct.pack("<I", len(payload)) + payload
        r = infer(client, model_name, _text_input(len(blob)), blob)
        if payload == b"a\x00b":
            assert_refused_or_fine(r, "/v2/infer")  # valid UTF-8 with a NUL: a prompt like any other
        else:
            assert r.status_code == 400, f"{payload!r}: {r.status_code} {r.text[:200]}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("depth", [100, 10_000, 100_000])
def test_deeply_nested_json(client, model_name, depth):
    nested = "[" * depth + "1" + "]" * depth
    for path, body in {
        "/v1/completions": f'{{"model": "{model_name}", "prompt": {nested}}}',
        f"/v2/models/{model_name}/generate": f'{{"text_input": "x", "parameters": {{"a": {nested}}}}}',
        f"/v2/models/{model_name}/infer": f'{{"inputs": [{{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": {nested}}}]}}',
    }.items():
        r = post(client, path, body)
        assert 400 <= r.status_code < 500, f"{path} depth {depth}: {r.status_code} {r.text[:200]}"


@pytest.mark.timeout(120)
def test_ten_megabyte_bodies_are_413(client, model_name):
    big = "x" * (10 << 20)
    for path in ("/v1/completions", f"/v2/models/{model_name}/generate", f"/v2/models/{model_name}/infer"):
        r = client.post(
            path, content=json.dumps({"prompt": big}).encode(), headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 413, f"{path}: {r.status_code}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None]
)
def test_wrong_content_types(client, model_name, content_type):
    body = json.dumps({"model": model_name, "prompt": "Hi", "max_tokens": 2}).encode()
    headers = {"Content-Type": content_type} if content_type else {}
    for path in ("/v1/completions", f"/v2/models/{model_name}/generate", f"/v2/models/{model_name}/infer"):
        r = client.post(path, content=body if "v1" in path else b"\x00\x01junk", headers=headers)
        assert_refused_or_fine(r, path)


@pytest.mark.timeout(120)
def test_values_lax_mode_would_convert_are_400(client, model_name):
    """What schemathesis found (seed 24680): 0 taken as a boolean, false as an integer, a string as
    a token id. /v1/cache/invalidate takes the admin key; tests/unit/test_json_body.py covers it."""
    cases = {
        "/tokenize": [{"model": model_name, "prompt": "Hi", "add_generation_prompt": 0}],
        "/detokenize": [{"tokens": ["1"]}, {"tokens": [True]}],
        "/v2/repository/index": [{"ready": 0}],
        "/v1/completions": [
            {"model": model_name, "prompt": "Hi", "max_tokens": False},
            {"model": model_name, "prompt": "Hi", "max_tokens": 2, "temperature": True},
            {"model": model_name, "prompt": "Hi", "max_tokens": 2, "echo": "true"},
        ],
        f"/v2/models/{model_name}/generate": [{"text_input": "Hi", "max_tokens": 2, "stream": 0}],
    }
    for path, bodies in cases.items():
        for body in bodies:
            r = client.post(path, json=body)
            assert r.status_code == 400, f"{path} {body}: {r.status_code} {r.text[:200]}"
            assert_refused_or_fine(r, path)
