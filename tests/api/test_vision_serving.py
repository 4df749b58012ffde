"""Images on the serving side (docs/vision.md) over a tiny random LLaVA made here: KServe v2 / Triton infer
with an image tensor beside text_input through the official tritonclient (HTTP and gRPC), greedy-equal to
the chat endpoint; the image limits from the run config and `trtserve run` flags; the vision encoder
cache's series on /metrics; and every front end decoding images off the event loop."""

from __future__ import annotations

import asyncio
import base64
import io
import socket
import time

import httpx
import numpy as np
import openai
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server
from PIL import Image
from tritonclient.utils import InferenceServerException
from vision_models import make_llava, random_image

pytestmark = pytest.mark.timeout(300)
T = 60
MODEL = "tiny-llava"
QUESTION = "What is in this picture?"
PROMPT = f"<|user|>{QUESTION}<image></s><|assistant|>"  # the chat template's text for _chat(...)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llava_engine(tmp_path_factory):
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    d = tmp_path_factory.mktemp("vision-serving")
    engine = d / MODEL
    build_engine(BuildConfig(model=str(make_llava(d / "hf")), tokens_per_block=16), engine, quiet=True)
    return engine


@pytest.fixture(scope="module")
def vserver(llava_engine, tmp_path_factory):
    d = tmp_path_factory.mktemp("vision-serving-logs")
    config = d / "run.yaml"  # the YAML's max_images is overridden by the flag; its bytes and pixels stand
    config.write_text("image_limits:\n  max_images: 1\n  max_bytes: 1MiB\n  max_pixels: 1000000\n")
    port = _free_port()
    args = ("--config", str(config), "--max-images", "2", "--grpc-port", str(port), "--kv-cache-memory", "64MiB")
    s = Server(llava_engine, *args, log=d / "server.log")
    s.grpc = f"127.0.0.1:{port}"
    yield s
    s.stop()


def _png(seed: int = 1, size=(61, 47)) -> bytes:
    buf = io.BytesIO()
    random_image(seed, size).save(buf, format="PNG")
    return buf.getvalue()


def _data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def _chat_text(server: Server, png: bytes, n: int = 8, question: str = QUESTION) -> str:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=T)
    parts = [{"type": "text", "text": question}, {"type": "image_url", "image_url": {"url": _data_url(png)}}]
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": parts}], max_tokens=n, temperature=0
    )
    return r.choices[0].message.content


def _text_input(mod, prompts: list[str]):
    text = mod.InferInput("text_input", [len(prompts), 1], "BYTES")
    text.set_data_from_numpy(np.array([[p.encode()] for p in prompts], dtype=object))
    return text


def _infer_inputs(mod, prompts: list[str], images: list[list[bytes]], name="image_bytes_input", binary=True):
    """text_input [prompts, 1], the image tensor [prompts, images] (BYTES), and greedy sampling."""
    img = mod.InferInput(name, [len(images), len(images[0])], "BYTES")
    kw = {} if mod is grpcclient else {"binary_data": binary}
    img.set_data_from_numpy(np.array(images, dtype=object), **kw)
    out = [_text_input(mod, prompts), img]
    for key, value, kind, dtype in (
        ("max_tokens", 8, "INT32", np.int32),
        ("temperature", 0.0, "FP32", np.float32),
        ("exclude_input_in_output", True, "BOOL", np.bool_),
    ):
        t = mod.InferInput(key, [1, 1], kind)
        t.set_data_from_numpy(np.array([[value]], dtype=dtype))
        out.append(t)
    return out


def _texts(result) -> list[str]:
    return [t.decode() for t in result.as_numpy("text_output").reshape(-1)]


def test_metadata_declares_the_image_tensors_only_on_a_vision_model(vserver, server, model_name):
    meta = httpclient.InferenceServerClient(vserver.url.removeprefix("http://")).get_model_metadata(MODEL)
    inputs = {i["name"]: i["datatype"] for i in meta["inputs"]}
    assert inputs["image_bytes_input"] == "BYTES" and inputs["image_url_input"] == "BYTES"
    config = grpcclient.InferenceServerClient(vserver.grpc).get_model_config(MODEL).config
    assert {i.name for i in config.input} >= {"image_bytes_input", "image_url_input"}
    text_only = httpx.get(f"{server.url}/v2/models/{model_name}", timeout=T).json()
    assert not {i["name"] for i in text_only["inputs"]} & {"image_bytes_input", "image_url_input"}


def test_infer_with_an_image_tensor_equals_chat_over_http_and_grpc(vserver):
    png = _png()
    want = _chat_text(vserver, png)
    assert want != _chat_text(vserver, _png(seed=2))  # the image changes the greedy tokens
    http = httpclient.InferenceServerClient(vserver.url.removeprefix("http://"))
    assert _texts(http.infer(MODEL, _infer_inputs(httpclient, [PROMPT], [[png]]))) == [want]
    as_url = _infer_inputs(httpclient, [PROMPT], [[_data_url(png).encode()]], "image_url_input", binary=False)
    assert _texts(http.infer(MODEL, as_url)) == [want]  # a data: URL in a JSON body
    grpc = grpcclient.InferenceServerClient(vserver.grpc)
    assert _texts(grpc.infer(MODEL, _infer_inputs(grpcclient, [PROMPT], [[png]]))) == [want]


def test_a_batch_of_prompts_takes_a_row_of_images_each(vserver):
    a, b = _png(1), _png(3)
    grpc = grpcclient.InferenceServerClient(vserver.grpc)
    got = _texts(grpc.infer(MODEL, _infer_inputs(grpcclient, [PROMPT, PROMPT], [[a], [b]])))
    assert got == [_chat_text(vserver, a), _chat_text(vserver, b)]


def test_image_tensor_errors_are_400s_naming_the_problem(vserver, server, model_name):
    http = httpclient.InferenceServerClient(vserver.url.removeprefix("http://"))
    three = httpclient.InferInput("image_bytes_input", [3], "BYTES")
    three.set_data_from_numpy(np.array([_png()] * 3, dtype=object))
    with pytest.raises(InferenceServerException, match="3 images for 2 prompts"):
        http.infer(MODEL, [_text_input(httpclient, [PROMPT, PROMPT]), three])
    wrong = httpclient.InferInput("image_bytes_input", [1], "FP32")
    wrong.set_data_from_numpy(np.zeros(1, np.float32))
    with pytest.raises(InferenceServerException, match="'image_bytes_input' data-type is 'FP32'.*'BYTES'"):
        http.infer(MODEL, [_text_input(httpclient, [PROMPT]), wrong])
    with pytest.raises(InferenceServerException, match="could not be decoded"):
        http.infer(MODEL, _infer_inputs(httpclient, [PROMPT], [[b"not a png"]]))
    text_only = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    with pytest.raises(InferenceServerException, match="text-only"):
        text_only.infer(model_name, _infer_inputs(httpclient, ["hi <image>"], [[_png()]]))


def _chat_error(server: Server, urls: list[str]) -> str:
    parts = [{"type": "text", "text": QUESTION}] + [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    body = {"model": MODEL, "messages": [{"role": "user", "content": parts}], "max_tokens": 2}
    r = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=T)
    assert r.status_code == 400, r.text
    return r.json()["error"]["message"]


def test_image_limits_come_from_the_run_config_and_flags(vserver):
    assert "at most 2 are allowed" in _chat_error(vserver, [_data_url(_png())] * 3)  # the flag over the YAML's 1
    big = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (700, 700, 3), np.uint8)).save(big, format="PNG")
    assert "exceeds the limit of 1048576 bytes" in _chat_error(vserver, [_data_url(big.getvalue())])
    wide = io.BytesIO()
    Image.fromarray(np.zeros((1000, 1001, 3), np.uint8)).save(wide, format="PNG")  # small in bytes
    assert "1001x1000 pixels exceeds the limit of 1000000 pixels" in _chat_error(vserver, [_data_url(wide.getvalue())])
    two = _infer_inputs(httpclient, [PROMPT], [[_png(), _png()]])  # two images per prompt: within the limit
    http = httpclient.InferenceServerClient(vserver.url.removeprefix("http://"))
    with pytest.raises(InferenceServerException, match="holds 1 image placeholders"):
        http.infer(MODEL, two)


def test_the_encoder_cache_is_on_metrics(vserver):
    png = _png(seed=11)
    before = {
        m: vserver.metric(m)
        for m in ("trtserve_vision_images_encoded_total", "trtserve_vision_encoder_cache_hits_total")
    }
    misses = vserver.metric("trtserve_vision_encoder_cache_misses_total")
    _chat_text(vserver, png, n=1)
    _chat_text(vserver, png, n=1, question="And this?")  # no prefix shared: the image's rows from the cache
    assert vserver.metric("trtserve_vision_images_encoded_total") == before["trtserve_vision_images_encoded_total"] + 1
    assert vserver.metric("trtserve_vision_encoder_cache_misses_total") == misses + 1
    assert (
        vserver.metric("trtserve_vision_encoder_cache_hits_total")
        >= before["trtserve_vision_encoder_cache_hits_total"] + 1
    )
    assert vserver.metric("trtserve_vision_encoder_cache_images") >= 1
    assert vserver.metric("trtserve_vision_encoder_cache_bytes") > 0


def test_every_front_end_decodes_images_off_the_event_loop(llava_engine, monkeypatch):
    """In process: the decoder records whether it ran on a thread with a running event loop."""
    from fastapi.testclient import TestClient

    import trtserve.serve.images as images
    from trtserve.serve.app import create_app
    from trtserve.serve.config import ServeConfig

    on_loop = []
    decode = images.decode_image

    def recording(data, limits):
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return decode(data, limits)

    monkeypatch.setattr(images, "decode_image", recording)
    b64, url = base64.b64encode(_png()).decode(), _data_url(_png())
    calls = {
        "/v1/chat/completions": {
            "model": MODEL,
            "max_tokens": 1,
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}],
        },
        "/v1/responses": {
            "model": MODEL,
            "max_output_tokens": 1,
            "store": False,
            "input": [{"role": "user", "content": [{"type": "input_image", "image_url": url}]}],
        },
        "/v1/messages": {
            "model": MODEL,
            "max_tokens": 1,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}
                    ],
                }
            ],
        },
        f"/v2/models/{MODEL}/generate": {"text_input": "<image>", "image_input": b64, "max_tokens": 1},
        f"/v2/models/{MODEL}/generate_stream": {"text_input": "<image>", "image_input": b64, "max_tokens": 1},
        f"/v2/models/{MODEL}/infer": {
            "inputs": [
                {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["<image>"]},
                {"name": "image_url_input", "datatype": "BYTES", "shape": [1], "data": [url]},
            ],
            "parameters": {"max_tokens": 1},
        },
    }
    with TestClient(create_app(llava_engine, ServeConfig(warmup=False, state_dir="none"))) as client:
        deadline = time.time() + T
        while client.get("/v2/health/ready").status_code != 200 and time.time() < deadline:
            time.sleep(0.2)  # the model loads in the background
        for path, body in calls.items():
            r = client.post(path, json=body)
            assert r.status_code == 200, (path, r.text)
    assert on_loop == [False] * len(calls)
