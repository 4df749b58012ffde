"""A vision chat through the official openai SDK against a live server answers as HF transformers does
(docs/vision.md): for tiny random Idefics3 and Gemma 3 checkpoints made here, with their real templates'
structure, a chat whose image data: URL opens the user turn (where Gemma 3's "user\n" meets the image's
"\n\n") gives HF generate's greedy text on its processor's inputs, over a prompt of the same length."""

from __future__ import annotations

import base64
import io

import openai
import pytest
from conftest import Server
from vision_models import hf_processor, make_gemma3, make_idefics3, random_image

pytestmark = pytest.mark.timeout(300)
T = 60
NEW_TOKENS = 8
QUESTION = "What is in this picture?"


@pytest.fixture(scope="module", params=["idefics3", "gemma3"])
def live(request, tmp_path_factory):
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    d = tmp_path_factory.mktemp(f"{request.param}-live")
    src = (make_idefics3 if request.param == "idefics3" else make_gemma3)(d / "hf")
    engine = d / f"tiny-{request.param}"
    build_engine(BuildConfig(model=str(src), tokens_per_block=16), engine, quiet=True)
    s = Server(engine, "--kv-cache-memory", "64MiB", log=d / "server.log")
    yield request.param, src, s
    s.stop()


def _hf_greedy(family: str, src, messages: list[dict]) -> tuple[str, int]:
    """HF generate's greedy text on the processor's inputs for `messages`, and the prompt's length."""
    import torch
    import transformers

    proc = hf_processor(family, src)
    arch = transformers.AutoConfig.from_pretrained(src).architectures[0]
    model = getattr(transformers, arch).from_pretrained(src, dtype=torch.float32).eval()
    inputs = proc.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    prompt_len = inputs["input_ids"].shape[1]
    return proc.tokenizer.decode(out[0, prompt_len:], skip_special_tokens=True), prompt_len


def test_openai_chat_with_an_image_equals_hf_generate(live):
    family, src, server = live
    img = random_image(1, (61, 47))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=T)
    parts = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": QUESTION}]
    r = client.chat.completions.create(
        model=f"tiny-{family}", messages=[{"role": "user", "content": parts}], max_tokens=NEW_TOKENS, temperature=0
    )
    hf_messages = [{"role": "user", "content": [{"type": "image", "image": img}, {"type": "text", "text": QUESTION}]}]
    text, prompt_len = _hf_greedy(family, src, hf_messages)
    assert r.usage.prompt_tokens == prompt_len
    assert r.choices[0].message.content == text
