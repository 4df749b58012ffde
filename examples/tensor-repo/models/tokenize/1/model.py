"""Text -> token ids and attention mask with the tokenizer.json beside this file (Triton Python
backend API). The tokenizer pads and truncates to a fixed length, so every text has one shape."""

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
            blobs = pb_utils.get_input_tensor_by_name(request, "text").as_numpy().reshape(-1)  # (batch,) bytes
            try:
                texts = [b.decode("utf-8") for b in blobs]
            except UnicodeDecodeError as e:
                error = pb_utils.TritonError(f"text is not UTF-8 ({e})", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            encodings = self.tokenizer.encode_batch(texts)
            ids = np.array([e.ids for e in encodings], dtype=np.int64)  # (batch, length)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)  # (batch, length)
            outputs = [pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("attention_mask", mask)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
