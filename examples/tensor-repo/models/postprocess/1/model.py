"""Logits -> the top k classes as "label:probability" strings (Triton Python backend API)."""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.top_k = int(params["top_k"])
        with open(os.path.join(args["model_repository"], params["labels_file"]), encoding="utf-8") as f:
            self.labels = [line.strip() for line in f if line.strip()]

    def execute(self, requests):
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "logits").as_numpy().astype(np.float64)  # (batch, 10)
            probs = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs /= probs.sum(axis=1, keepdims=True)
            top = np.argsort(-probs, axis=1, kind="stable")[:, : self.top_k]  # (batch, k)
            labels = np.array(
                [[f"{self.labels[i]}:{p[i]:.6f}".encode() for i in row] for row, p in zip(top, probs, strict=True)],
                dtype=np.object_,
            )
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("labels", labels)]))
        return responses
