"""Structured outputs and receipts with an image in the prompt, against a live `trtserve run --receipts on`
over a tiny random LLaVA made here (docs/vision.md, "Works with"): the output validates and streaming
does not change it; the receipt records the image by content hash, never its bytes, and a replay of it
is refused in one sentence (docs/receipts.md)."""

from __future__ import annotations

import base64
import io
import json

import httpx
import jsonschema
import openai
import pytest
from conftest import Server
from vision_models import make_llava, random_image

from trtserve.engine.errors import UserError
from trtserve.engine.manifest import read_manifest
from trtserve.serve.receipts.model import Receipt
from trtserve.vision.pixels import image_input

pytestmark = pytest.mark.timeout(300)
MODEL = "tiny-llava"
KEY = "vision-admin"
ADMIN = {"Authorization": f"Bearer {KEY}"}
SCHEMA = {
    "type": "object",
    "properties": {"kind": {"enum": ["cat", "dog"]}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["kind", "n"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "picture", "schema": SCHEMA, "strict": True}}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    d = tmp_path_factory.mktemp("vision-features-live")
    engine = d / MODEL
    build_engine(BuildConfig(model=str(make_llava(d / "hf")), tokens_per_block=16), engine, quiet=True)
    args = ("--receipts", "on", "--state-dir", str(d / "state"), "--admin-key", KEY, "--kv-cache-memory", "64MiB")
    s = Server(engine, *args, log=d / "server.log")
    s.engine = engine
    yield s
    s.stop()


def _png(seed: int) -> bytes:
    buf = io.BytesIO()
    random_image(seed).save(buf, format="PNG")
    return buf.getvalue()


def _messages(png: bytes) -> list[dict]:
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    parts = [{"type": "text", "text": "What is in this picture?"}, {"type": "image_url", "image_url": {"url": url}}]
    return [{"role": "user", "content": parts}]


def test_structured_output_with_an_image_validates_and_streams_the_same(served):
    client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="x", max_retries=0, timeout=60)
    kw = dict(model=MODEL, messages=_messages(_png(1)), max_tokens=40, temperature=0, response_format=FORMAT)
    whole = client.chat.completions.create(**kw).choices[0].message.content
    jsonschema.validate(json.loads(whole), SCHEMA)
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(**kw, stream=True))
    assert streamed == whole


def test_a_receipt_records_the_image_by_hash_and_its_replay_is_refused(served):
    png = _png(2)
    body = {"model": MODEL, "messages": _messages(png), "max_tokens": 4, "temperature": 0}
    r = httpx.post(f"{served.url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    stored = httpx.get(f"{served.url}/v1/receipts/{r.headers['x-trtserve-receipt']}", headers=ADMIN, timeout=30)
    receipt = Receipt.model_validate(stored.json())
    from PIL import Image

    want = image_input(Image.open(io.BytesIO(png)), read_manifest(served.engine).vision).content_hash
    assert receipt.images == [want]
    assert base64.b64encode(png).decode()[:64] not in stored.text  # the image's bytes are not stored
    replay = httpx.post(f"{served.url}/v1/replay", json={"receipt": stored.json()}, headers=ADMIN, timeout=60)
    assert replay.status_code == 400 and "content hash only" in replay.json()["error"]["message"], replay.text

    from trtserve.cli.replay import replay_offline

    with pytest.raises(UserError, match="send.* the request again with the same images"):
        replay_offline(receipt, served.engine, None, False, None)
