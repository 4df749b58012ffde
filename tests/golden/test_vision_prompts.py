"""A served vision prompt's token ids equal HF's processor's (docs/vision.md): for each vision family, a chat
with a system message, text and one or two images through /tokenize (the chat front ends' encode_chat) equals
processor.apply_chat_template(..., tokenize=True), and KServe's text_input with the template's text equals
processor(text=..., images=...). The tiny checkpoints carry their real templates' structure: Gemma 3 writes
<start_of_image> right after "user\\n", where HF's "\\n\\n" merges with that newline into one token."""

from __future__ import annotations

import base64
import io
import time
from types import SimpleNamespace

import pytest
from vision_goldens import build, make_gemma3, make_idefics3, make_llava, random_image
from vision_models import LLAVA_HF_TEMPLATE, hf_processor

from trtserve.engine.manifest import read_manifest
from trtserve.engine.tokenizer import Tokenizer
from trtserve.serve.config import ServeConfig
from trtserve.serve.images import prompt_with_images
from trtserve.vision.pixels import image_input

SIZES = [(61, 47), (20, 50)]  # Idefics3: 2x2 and 2x1 tiles
SYSTEM = "You are terse."
CHATS = {
    "system, text then an image": [("text", "What is this?"), ("image", 0)],
    "an image first, then text and another image": [("image", 0), ("text", "Compare it with"), ("image", 1)],
}


@pytest.fixture(scope="module", params=["llava", "idefics3", "gemma3"])
def family(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(request.param)
    make = {"llava": lambda p: make_llava(p, template=LLAVA_HF_TEMPLATE), "idefics3": make_idefics3}
    src = make.get(request.param, make_gemma3)(d / "hf")
    return request.param, src, build(src, d / "engine")


def _png(img) -> str:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _messages(parts, imgs, with_system: bool) -> tuple[list[dict], list[dict]]:
    """The chat as an OpenAI client sends it, and as HF's processor takes it."""
    ours = [{"type": "text", "text": x} if k == "text" else {"type": "image_url", "image_url": {"url": _png(imgs[x])}}
            for k, x in parts]  # fmt: skip
    hf = [{"type": "text", "text": x} if k == "text" else {"type": "image", "image": imgs[x]} for k, x in parts]
    system = [{"role": "system", "content": SYSTEM}] if with_system else []
    hf_system = [{"role": "system", "content": [{"type": "text", "text": SYSTEM}]}] if with_system else []
    return system + [{"role": "user", "content": ours}], hf_system + [{"role": "user", "content": hf}]


def _flat(ids) -> list[int]:
    ids = ids.tolist() if hasattr(ids, "tolist") else ids
    return ids[0] if ids and isinstance(ids[0], list) else ids


def test_chat_prompts_equal_hf_processor(family):
    from fastapi.testclient import TestClient

    from trtserve.serve.app import create_app

    name, src, engine = family
    proc = hf_processor(name, src)
    imgs = [random_image(i + 1, SIZES[i]) for i in range(2)]
    with TestClient(create_app(engine, ServeConfig(warmup=False, state_dir="none"))) as client:
        deadline = time.time() + 60
        while client.get("/v2/health/ready").status_code != 200 and time.time() < deadline:
            time.sleep(0.2)  # the model loads in the background
        for i, (label, parts) in enumerate(CHATS.items()):
            ours, hf = _messages(parts, imgs, with_system=i == 0)
            r = client.post("/tokenize", json={"messages": ours, "add_generation_prompt": True})
            assert r.status_code == 200, r.text
            out = proc.apply_chat_template(hf, add_generation_prompt=True, tokenize=True, return_dict=True)
            assert r.json()["tokens"] == _flat(out["input_ids"]), label


def test_kserve_text_input_equals_hf_processor(family):
    """KServe's text_input is not templated: with the template's text it is tokenized as processor(text=...)."""
    name, src, engine = family
    proc = hf_processor(name, src)
    vision = read_manifest(engine).vision
    imgs = [random_image(i + 1, SIZES[i]) for i in range(2)]
    _, hf = _messages(CHATS["an image first, then text and another image"], imgs, with_system=True)
    text = proc.apply_chat_template(hf, add_generation_prompt=True, tokenize=False)
    svc = SimpleNamespace(
        tokenizer=Tokenizer(engine / "tokenizer"), engine=SimpleNamespace(info=SimpleNamespace(vision=vision)),
        config=ServeConfig(), model_name=name,
    )  # fmt: skip
    ours = prompt_with_images(svc, text, tuple(image_input(i, vision) for i in imgs))
    assert ours == _flat(proc(text=text, images=imgs)["input_ids"])
