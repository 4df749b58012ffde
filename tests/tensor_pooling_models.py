"""Tensor models for the pooling endpoints, written into a test's repository (docs/pooling.md, "Tensor
models"): `cross_encoder` (a pair tokenizer step -> an ONNX cross-encoder with one logit) and `intent`
(the worked example's tokenizer step -> an ONNX classifier with three labels), beside the example's
`embedder`. The ONNX graphs are small BERT-like encoders: token lookup, linear + tanh, masked mean, a
linear head."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

INTENTS = ["billing", "support", "sales"]
HIDDEN = 24

PAIR_TOKENIZE = '''"""(query, document) -> token ids and mask of the pair (tokenizer.json beside this file)."""

import os

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer


class TritonPythonModel:
    def initialize(self, args):
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        self.tokenizer = Tokenizer.from_file(os.path.join(version_dir, "tokenizer.json"))

    def execute(self, requests):
        responses = []
        for request in requests:
            q = pb_utils.get_input_tensor_by_name(request, "query").as_numpy().reshape(-1)
            d = pb_utils.get_input_tensor_by_name(request, "document").as_numpy().reshape(-1)
            pairs = [(a.decode(), b.decode()) for a, b in zip(q, d)]
            encodings = self.tokenizer.encode_batch(pairs)
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            outputs = [pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("attention_mask", mask)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
'''

PAIR_TOKENIZE_CONFIG = """name: "pair_tokenize"
backend: "python"
max_batch_size: 16
input [
  { name: "query" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "document" data_type: TYPE_STRING dims: [ 1 ] }
]
output [
  { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }
]
dynamic_batching { }
"""


def net_config(name: str, labels: int, label_file: bool) -> str:
    label = ' label_filename: "labels.txt"' if label_file else ""
    return f"""name: "{name}"
backend: "onnxruntime"
max_batch_size: 16
input [
  {{ name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] }},
  {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }}
]
output [
  {{ name: "logits" data_type: TYPE_FP32 dims: [ {labels} ]{label} }}
]
dynamic_batching {{ max_queue_delay_microseconds: 1000 }}
"""


def ensemble_config(name: str, tokenizer: str, net: str, texts: list[str], labels: int, params: dict) -> str:
    inputs = ",\n".join(f'  {{ name: "{t}" data_type: TYPE_STRING dims: [ 1 ] }}' for t in texts)
    maps = "\n".join(f'      input_map {{ key: "{t}" value: "{t}" }}' for t in texts)
    label = ' label_filename: "labels.txt"' if labels > 1 else ""
    parameters = "\n".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in params.items())
    return f"""name: "{name}"
platform: "ensemble"
max_batch_size: 16
input [
{inputs}
]
output [
  {{ name: "logits" data_type: TYPE_FP32 dims: [ {labels} ]{label} }}
]
{parameters}
ensemble_scheduling {{
  step [
    {{
      model_name: "{tokenizer}"
      model_version: -1
{maps}
      output_map {{ key: "input_ids" value: "input_ids" }}
      output_map {{ key: "attention_mask" value: "attention_mask" }}
    }},
    {{
      model_name: "{net}"
      model_version: -1
      input_map {{ key: "input_ids" value: "input_ids" }}
      input_map {{ key: "attention_mask" value: "attention_mask" }}
      output_map {{ key: "logits" value: "logits" }}
    }}
  ]
}}
"""


def head_onnx(vocab_size: int, labels: int, seed: int) -> onnx.ModelProto:
    """input_ids, attention_mask (batch, tokens) -> logits (batch, labels)."""
    rng = np.random.default_rng(seed)
    consts = {
        "table": rng.normal(0, 1, (vocab_size, HIDDEN)).astype(np.float32),
        "w": rng.normal(0, HIDDEN**-0.5, (HIDDEN, HIDDEN)).astype(np.float32),
        "b": rng.normal(0, 0.1, HIDDEN).astype(np.float32),
        "w2": rng.normal(0, 2 * HIDDEN**-0.5, (HIDDEN, labels)).astype(np.float32),
        "b2": rng.normal(0, 0.1, labels).astype(np.float32),
        "axis1": np.array([1], dtype=np.int64),
        "axis2": np.array([2], dtype=np.int64),
        "one": np.array(1.0, dtype=np.float32),
    }
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["x"]),  # (batch, tokens, hidden)
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["xb"]),
        helper.make_node("Tanh", ["xb"], ["h"]),
        helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),  # (batch, tokens)
        helper.make_node("Unsqueeze", ["m", "axis2"], ["m3"]),  # (batch, tokens, 1)
        helper.make_node("Mul", ["h", "m3"], ["hm"]),
        helper.make_node("ReduceSum", ["hm", "axis1"], ["total"], keepdims=0),  # (batch, hidden)
        helper.make_node("ReduceSum", ["m3", "axis1"], ["count"], keepdims=0),  # (batch, 1)
        helper.make_node("Max", ["count", "one"], ["count1"]),
        helper.make_node("Div", ["total", "count1"], ["pooled"]),
        helper.make_node("MatMul", ["pooled", "w2"], ["pw"]),  # (batch, labels)
        helper.make_node("Add", ["pw", "b2"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "head",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", labels])],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def add_pooling_models(repo: Path, tokenizer, seed: int = 0) -> None:
    """Add cross_encoder (+ pair_tokenize, cross_net) and intent (+ intent_net) to the example's repo."""
    vocab = tokenizer.get_vocab_size()
    (repo / "pair_tokenize" / "1").mkdir(parents=True)
    (repo / "pair_tokenize" / "config.pbtxt").write_text(PAIR_TOKENIZE_CONFIG)
    (repo / "pair_tokenize" / "1" / "model.py").write_text(PAIR_TOKENIZE)
    tokenizer.save(str(repo / "pair_tokenize" / "1" / "tokenizer.json"))
    for net, labels in (("cross_net", 1), ("intent_net", len(INTENTS))):
        (repo / net / "1").mkdir(parents=True)
        (repo / net / "config.pbtxt").write_text(net_config(net, labels, labels > 1))
        onnx.save(head_onnx(vocab, labels, seed + labels), repo / net / "1" / "model.onnx")
    (repo / "intent_net" / "labels.txt").write_text("".join(f"{x}\n" for x in INTENTS))
    pair = {"pooling_task": "classify", "text_pair_inputs": "query,document"}
    text = {"pooling_task": "classify", "text_input": "text"}
    for name, tok, net, texts, labels, params in (
        ("cross_encoder", "pair_tokenize", "cross_net", ["query", "document"], 1, pair),
        ("intent", "tokenize", "intent_net", ["text"], len(INTENTS), text),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(ensemble_config(name, tok, net, texts, labels, params))
    (repo / "intent" / "labels.txt").write_text("".join(f"{x}\n" for x in INTENTS))
