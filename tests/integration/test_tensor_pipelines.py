"""The worked example in process (no server): its Python steps and ensembles, the image classifier
and the embedder, against references computed here (Pillow + numpy + an onnxruntime session), and
how an ensemble's errors surface (tests/integration/test_tensor_python_steps.py: model.py itself)."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image
from tensor_models import example_module
from tokenizers import Tokenizer

from trtserve.tensor.config import read_config
from trtserve.tensor.kinds import open_model
from trtserve.tensor.types import (
    InferRequest,
    InvalidInput,
    ModelNotReady,
    QueueFull,
    TensorError,
)

EXAMPLE = example_module()  # examples/tensor-repo/make_repo.py

MEAN = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32)  # preprocess/config.pbtxt's parameters
STD = np.array([0.2470, 0.2435, 0.2616], dtype=np.float32)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return EXAMPLE.make_repo(tmp_path_factory.mktemp("tensor-repo") / "repo")


class Opened:
    """Every model of a repository dir opened in process, resolving ensemble steps among themselves."""

    def __init__(self, root: Path, names: list[str] | None = None):
        self.models = {}
        for d in sorted(p for p in root.iterdir() if p.is_dir() and (names is None or p.name in names)):
            self.models[d.name] = open_model(read_config(d, d.name), d / "1", self.resolve)

    def resolve(self, name: str, version: int):
        if name not in self.models:
            raise ModelNotReady(f"model {name!r} is not loaded")
        return self.models[name]

    def infer(self, name: str, **inputs) -> dict[str, np.ndarray]:
        return asyncio.run(self.models[name].infer(InferRequest(inputs)))

    def close(self) -> None:
        for m in self.models.values():
            m.shutdown()


@pytest.fixture
def opened(repo):
    o = Opened(repo)
    yield o
    o.close()


def _image(seed: int, size: tuple[int, int], fmt: str, mode: str = "RGB") -> bytes:
    pixels = (np.random.default_rng(seed).random((size[1], size[0], 3)) * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buf, fmt)
    return buf.getvalue()


def _reference_pixels(blob: bytes) -> np.ndarray:
    image = Image.open(io.BytesIO(blob)).convert("RGB").resize((32, 32), Image.BILINEAR)
    return ((np.asarray(image, dtype=np.float32) / 255.0 - MEAN) / STD).transpose(2, 0, 1)  # (3, 32, 32)


def _blobs(*blobs: bytes) -> np.ndarray:
    return np.array([[b] for b in blobs], dtype=np.object_)  # (batch, 1)


IMAGES = [
    _image(0, (40, 50), "PNG"),
    _image(1, (32, 32), "JPEG"),
    _image(2, (64, 17), "PNG", "L"),
    _image(3, (300, 200), "JPEG"),
]


def test_python_step_alone_matches_pillow_reference(opened):
    out = opened.infer("preprocess", image_bytes=_blobs(*IMAGES[:2]))
    assert out["image"].dtype == np.float32 and out["image"].shape == (2, 3, 32, 32)
    np.testing.assert_allclose(out["image"], np.stack([_reference_pixels(b) for b in IMAGES[:2]]), atol=1e-6)


def test_image_ensemble_equals_reference(opened, repo):
    session = ort.InferenceSession(str(repo / "classifier" / "1" / "model.onnx"))
    labels = EXAMPLE.LABELS

    async def all_at_once():
        model = opened.models["image_classifier"]
        return await asyncio.gather(*(model.infer(InferRequest({"image_bytes": _blobs(b)})) for b in IMAGES))

    for blob, out in zip(IMAGES, asyncio.run(all_at_once()), strict=True):
        (logits,) = session.run(None, {"image": _reference_pixels(blob)[None]})
        np.testing.assert_allclose(out["logits"], logits, atol=1e-5)
        probs = np.exp(logits[0].astype(np.float64) - logits[0].max())
        probs /= probs.sum()
        top = np.argsort(-probs, kind="stable")[:3]
        got = [s.decode().split(":") for s in out["labels"][0]]
        assert [g[0] for g in got] == [labels[i] for i in top]
        np.testing.assert_allclose([float(g[1]) for g in got], probs[top], atol=1e-5)
    stats = opened.models["image_classifier"].stats.to_json("image_classifier", "1")
    assert stats["inference_count"] == len(IMAGES) and stats["inference_stats"]["success"]["count"] == len(IMAGES)
    # composing models keep their own batchers and statistics
    assert opened.models["classifier"].stats.to_json("classifier", "1")["inference_count"] == len(IMAGES)


def test_ensemble_batch_and_output_selection(opened):
    out = asyncio.run(
        opened.models["image_classifier"].infer(InferRequest({"image_bytes": _blobs(*IMAGES[:3])}, outputs=("logits",)))
    )
    assert list(out) == ["logits"] and out["logits"].shape == (3, 10)
    # the postprocess step was not asked for: nothing reads its output
    assert opened.models["postprocess"].stats.to_json("postprocess", "1")["inference_count"] == 0


def test_embedder_text_and_token_arrays_equal_reference(opened, repo):
    tok = Tokenizer.from_file(str(repo / "tokenize" / "1" / "tokenizer.json"))
    session = ort.InferenceSession(str(repo / "encoder" / "1" / "model.onnx"))
    text = "The quick brown fox jumps over the lazy dog"
    enc = tok.encode(text)
    ids, mask = np.array([enc.ids], dtype=np.int64), np.array([enc.attention_mask], dtype=np.int64)
    (reference,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
    by_text = opened.infer("embedder", text=_blobs(text.encode()))
    np.testing.assert_allclose(by_text["embedding"], reference, atol=1e-5)
    np.testing.assert_array_equal(by_text["attention_mask"], mask)
    # token arrays: the step tensors in place of the text; the tokenize step is skipped
    real = int(mask.sum())
    by_tokens = opened.infer("embedder", input_ids=ids[:, :real], attention_mask=mask[:, :real])
    np.testing.assert_allclose(by_tokens["embedding"], reference, atol=1e-5)
    assert opened.models["tokenize"].stats.to_json("tokenize", "1")["inference_count"] == 1


def test_bad_image_is_the_clients_error_naming_the_step(opened):
    with pytest.raises(InvalidInput, match=r"step 'preprocess'.*image_bytes is not a PNG or JPEG image"):
        opened.infer("image_classifier", image_bytes=_blobs(b"not an image"))


def test_ensemble_input_and_output_checks(opened):
    model = opened.models["image_classifier"]
    with pytest.raises(InvalidInput, match="has no output 'scores'"):
        asyncio.run(model.infer(InferRequest({"image_bytes": _blobs(IMAGES[0])}, outputs=("scores",))))
    with pytest.raises(InvalidInput, match="'pixels'"):
        asyncio.run(model.infer(InferRequest({"pixels": np.zeros((1, 3), np.float32)})))
    with pytest.raises(InvalidInput, match="expects 'BYTES'"):
        asyncio.run(model.infer(InferRequest({"image_bytes": np.zeros((1, 1), np.float32)})))


def test_missing_step_model_is_not_ready(repo):
    o = Opened(repo, ["image_classifier", "preprocess", "postprocess"])  # no classifier
    try:
        assert not o.models["image_classifier"].health()
        with pytest.raises(ModelNotReady, match="step 'classifier'"):
            o.infer("image_classifier", image_bytes=_blobs(IMAGES[0]))
        stats = o.models["image_classifier"].stats.to_json("image_classifier", "1")
        assert stats["inference_stats"]["fail"]["count"] == 1 and stats["inference_count"] == 0
    finally:
        o.close()


def test_step_error_keeps_its_status(repo):
    class Full:
        async def infer(self, request):
            raise QueueFull("model 'classifier' queue is full")

        def shutdown(self):
            pass

    o = Opened(repo, ["image_classifier", "preprocess", "postprocess"])
    o.models["classifier"] = Full()
    try:
        with pytest.raises(QueueFull, match="step 'classifier'") as err:
            o.infer("image_classifier", image_bytes=_blobs(IMAGES[0]))
        assert err.value.status == 429
    finally:
        o.close()


def test_unloaded_ensemble_refuses(opened):
    model = opened.models["image_classifier"]
    model.shutdown()
    with pytest.raises(TensorError, match="unloading") as err:
        opened.infer("image_classifier", image_bytes=_blobs(IMAGES[0]))
    assert err.value.status == 503
