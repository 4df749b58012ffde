"""Write the worked example's model repository: an image-classifier ensemble (Python preprocess ->
ONNX classifier -> Python postprocess) and an embedder ensemble (Python tokenizer -> ONNX encoder).

    python examples/tensor-repo/make_repo.py /tmp/tensor-repo
    trtserve run /tmp/tensor-repo

The configs and model.py files are the ones under models/ here; this script adds what is generated
(the two ONNX graphs with seeded random weights, the tokenizer, the labels files). Deterministic:
the same seed writes the same bytes. Tests import it (tests/tensor_models.py).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MODELS = Path(__file__).parent / "models"
LABELS = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
IMAGE_SIZE, HIDDEN, EMBED_HIDDEN, EMBED_DIM, MAX_TOKENS = 32, 64, 24, 32, 16
CORPUS = (
    "the quick brown fox jumps over the lazy dog . a model server batches requests from many clients . "
    "images are decoded resized and normalized before the classifier runs . embeddings map text to vectors "
    "so that similar sentences lie close together . tensor models have fixed shapes and no kv cache ."
)
OPSET = 17


def classifier_onnx(seed: int = 0) -> onnx.ModelProto:
    """image (batch, 3, 32, 32) -> flatten -> 64 -> relu -> logits (batch, 10)."""
    rng = np.random.default_rng(seed)
    features = 3 * IMAGE_SIZE * IMAGE_SIZE
    weights = {
        "w1": rng.normal(0, features**-0.5, (features, HIDDEN)).astype(np.float32),
        "b1": rng.normal(0, 0.1, HIDDEN).astype(np.float32),
        "w2": rng.normal(0, HIDDEN**-0.5, (HIDDEN, len(LABELS))).astype(np.float32),
        "b2": rng.normal(0, 0.1, len(LABELS)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Flatten", ["image"], ["x"], axis=1),  # (batch, 3072)
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]),  # (batch, 64)
        helper.make_node("Relu", ["h"], ["a"]),
        helper.make_node("Gemm", ["a", "w2", "b2"], ["logits"]),  # (batch, 10)
    ]
    graph = helper.make_graph(
        nodes,
        "classifier",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, IMAGE_SIZE, IMAGE_SIZE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", len(LABELS)])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    return _model(graph)


def encoder_onnx(vocab_size: int, seed: int = 0) -> onnx.ModelProto:
    """input_ids, attention_mask (batch, tokens) -> embedding (batch, 32): lookup, linear + tanh,
    mean over the tokens the mask keeps, L2 normalization."""
    rng = np.random.default_rng(seed + 1)
    consts = {
        "table": rng.normal(0, 1, (vocab_size, EMBED_HIDDEN)).astype(np.float32),
        "w": rng.normal(0, EMBED_HIDDEN**-0.5, (EMBED_HIDDEN, EMBED_DIM)).astype(np.float32),
        "b": rng.normal(0, 0.1, EMBED_DIM).astype(np.float32),
        "axis1": np.array([1], dtype=np.int64),
        "axis2": np.array([2], dtype=np.int64),
        "one": np.array(1.0, dtype=np.float32),
        "eps": np.array(1e-12, dtype=np.float32),
    }
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["x"]),  # (batch, tokens, 24)
        helper.make_node("MatMul", ["x", "w"], ["xw"]),  # (batch, tokens, 32)
        helper.make_node("Add", ["xw", "b"], ["xb"]),
        helper.make_node("Tanh", ["xb"], ["h"]),
        helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),  # (batch, tokens)
        helper.make_node("Unsqueeze", ["m", "axis2"], ["m3"]),  # (batch, tokens, 1)
        helper.make_node("Mul", ["h", "m3"], ["hm"]),
        helper.make_node("ReduceSum", ["hm", "axis1"], ["total"], keepdims=0),  # (batch, 32)
        helper.make_node("ReduceSum", ["m3", "axis1"], ["count"], keepdims=0),  # (batch, 1)
        helper.make_node("Max", ["count", "one"], ["count1"]),  # an all-padding row divides by 1
        helper.make_node("Div", ["total", "count1"], ["mean"]),
        helper.make_node("Mul", ["mean", "mean"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "axis1"], ["sumsq"], keepdims=1),  # (batch, 1)
        helper.make_node("Sqrt", ["sumsq"], ["norm"]),
        helper.make_node("Max", ["norm", "eps"], ["norm1"]),
        helper.make_node("Div", ["mean", "norm1"], ["embedding"]),  # (batch, 32), unit length
    ]
    graph = helper.make_graph(
        nodes,
        "encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", EMBED_DIM])],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    return _model(graph)


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="make_repo")
    model.ir_version = 8  # what every onnxruntime since 1.10 reads
    onnx.checker.check_model(model)
    return model


def tokenizer():
    """A lower-casing word-level tokenizer over CORPUS's words ([PAD] 0, [UNK] 1), padding and
    truncating every text to MAX_TOKENS."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    words = sorted(set(CORPUS.split()))
    vocab = {"[PAD]": 0, "[UNK]": 1} | {w: i + 2 for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.enable_truncation(MAX_TOKENS)
    tok.enable_padding(pad_id=0, pad_token="[PAD]", length=MAX_TOKENS)
    return tok


def make_repo(dest: Path, seed: int = 0) -> Path:
    """Write the repository under dest (created; an existing one is replaced) and return it."""
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(MODELS, dest, ignore=shutil.ignore_patterns("__pycache__"))
    labels = "".join(f"{label}\n" for label in LABELS)
    (dest / "classifier" / "labels.txt").write_text(labels)
    (dest / "postprocess" / "labels.txt").write_text(labels)
    for name in ("classifier", "encoder", "image_classifier", "embedder"):
        (dest / name / "1").mkdir(exist_ok=True)  # an ensemble's version dir is empty, as in Triton
    onnx.save(classifier_onnx(seed), dest / "classifier" / "1" / "model.onnx")
    tok = tokenizer()
    tok.save(str(dest / "tokenize" / "1" / "tokenizer.json"))
    onnx.save(encoder_onnx(tok.get_vocab_size(), seed), dest / "encoder" / "1" / "model.onnx")
    for name in ("embedder", "encoder"):  # /v1/embeddings refuses token ids outside it with a 400
        with open(dest / name / "config.pbtxt", "a") as f:
            f.write(f'parameters {{ key: "vocab_size" value: {{ string_value: "{tok.get_vocab_size()}" }} }}\n')
    return dest


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/tensor-repo/make_repo.py DEST_DIR")
    print(make_repo(Path(sys.argv[1])))
