"""Images through every front end of a live server (docs/vision.md) over a tiny random LLaVA made here: the
official openai SDK with an image_url data: URL (chat) and input_image (Responses), the anthropic SDK with
a base64 image block, KServe's text_input; each answers with the image's rows in its prompt. A malformed
image, an oversized one, an http URL without --allowed-media-domains and an image sent to a text-only
model are each a 400 naming the problem."""

from __future__ import annotations

import base64
import io

import anthropic
import httpx
import numpy as np
import openai
import pytest
from conftest import Server
from PIL import Image
from vision_models import make_llava, random_image

pytestmark = pytest.mark.timeout(300)
T = 60
TOKENS_PER_IMAGE = 16  # the tiny CLIP tower: 56 / 14 = 4 x 4 patches, the CLS row dropped


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory):
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    d = tmp_path_factory.mktemp("vision-live")
    src = make_llava(d / "hf")
    engine = d / "tiny-llava"
    build_engine(BuildConfig(model=str(src), tokens_per_block=16), engine, quiet=True)
    s = Server(engine, "--kv-cache-memory", "64MiB", log=d / "server.log")
    yield s
    s.stop()


def _png(seed: int = 1, size=(61, 47)) -> bytes:
    buf = io.BytesIO()
    random_image(seed, size).save(buf, format="PNG")
    return buf.getvalue()


def _data_url(data: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64,{base64.b64encode(data).decode()}"


def _chat(url: str, text: str = "What is in this picture?") -> list[dict]:
    parts = [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]
    return [{"role": "user", "content": parts}]


def _text_only_tokens(client, text: str = "What is in this picture?") -> int:
    r = client.chat.completions.create(
        model="tiny-llava", messages=[{"role": "user", "content": text}], max_tokens=1, temperature=0
    )
    return r.usage.prompt_tokens


def test_openai_chat_takes_an_image_url_data_url(vision_server):
    client = openai.OpenAI(base_url=f"{vision_server.url}/v1", api_key="x", max_retries=0, timeout=T)
    r = client.chat.completions.create(
        model="tiny-llava", messages=_chat(_data_url(_png())), max_tokens=8, temperature=0
    )
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 8
    # the prompt holds the image's rows in place of its one placeholder
    assert r.usage.prompt_tokens == _text_only_tokens(client) + TOKENS_PER_IMAGE
    again = client.chat.completions.create(
        model="tiny-llava", messages=_chat(_data_url(_png())), max_tokens=8, temperature=0
    )
    assert again.choices[0].message.content == r.choices[0].message.content
    other = client.chat.completions.create(
        model="tiny-llava", messages=_chat(_data_url(_png(seed=2))), max_tokens=8, temperature=0
    )
    assert other.usage.prompt_tokens == r.usage.prompt_tokens  # same tokens; the image is not the same
    jpeg = io.BytesIO()
    random_image(3).save(jpeg, format="JPEG")
    ok = client.chat.completions.create(  # greedy, past EOS: a sampled EOS first made this flaky
        model="tiny-llava",
        messages=_chat(_data_url(jpeg.getvalue(), "image/jpeg")),
        max_tokens=2,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert ok.usage.completion_tokens == 2


def test_responses_take_input_image(vision_server):
    client = openai.OpenAI(base_url=f"{vision_server.url}/v1", api_key="x", max_retries=0, timeout=T)
    content = [
        {"type": "input_text", "text": "Describe it."},
        {"type": "input_image", "image_url": _data_url(_png()), "detail": "auto"},
    ]
    r = client.responses.create(
        model="tiny-llava", input=[{"role": "user", "content": content}], max_output_tokens=6, store=False
    )
    assert r.status == "incomplete" or r.status == "completed"
    assert r.usage.output_tokens == 6 and r.usage.input_tokens > TOKENS_PER_IMAGE


def test_anthropic_takes_a_base64_image_block(vision_server):
    client = anthropic.Anthropic(base_url=vision_server.url, api_key="x", max_retries=0, timeout=T)
    block = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(_png()).decode()},
    }
    m = client.messages.create(
        model="tiny-llava",
        max_tokens=6,
        messages=[{"role": "user", "content": [block, {"type": "text", "text": "What is this?"}]}],
    )
    assert m.usage.output_tokens == 6 and m.usage.input_tokens > TOKENS_PER_IMAGE


def _error(server: Server, messages: list[dict], model: str = "tiny-llava") -> tuple[int, str]:
    r = httpx.post(
        f"{server.url}/v1/chat/completions", json={"model": model, "messages": messages, "max_tokens": 2}, timeout=T
    )
    return r.status_code, r.json()["error"]["message"]


def test_kserve_generate_takes_image_input_beside_text_input(vision_server):
    body = {"text_input": "Look: <image> what is it?", "image_input": base64.b64encode(_png()).decode()}
    r = httpx.post(f"{vision_server.url}/v2/models/tiny-llava/generate", json=body | {"max_tokens": 3}, timeout=T)
    assert r.status_code == 200, r.text
    assert r.json()["text_output"].startswith("Look: <image> what is it?")
    missing = httpx.post(
        f"{vision_server.url}/v2/models/tiny-llava/generate", json=body | {"text_input": "no"}, timeout=T
    )
    assert missing.status_code == 400 and "one per image" in missing.json()["error"]


def test_bad_images_are_400s_naming_the_problem(vision_server, server, model_name):
    status, msg = _error(vision_server, _chat("data:image/png;base64," + base64.b64encode(b"not a png").decode()))
    assert status == 400 and "could not be decoded" in msg
    huge = io.BytesIO()
    Image.fromarray(np.zeros((4200, 4200, 3), np.uint8)).save(huge, format="PNG")
    status, msg = _error(vision_server, _chat(_data_url(huge.getvalue())))
    assert status == 400 and "exceeds the limit" in msg
    status, msg = _error(vision_server, _chat("https://example.com/cat.png"))
    assert status == 400 and "--allowed-media-domains" in msg
    status, msg = _error(server, _chat(_data_url(_png())), model_name)  # the session's text-only tiny llama
    assert status == 400 and "text-only" in msg
