"""Decode, resize and normalize images for the classifier (Triton Python backend API)."""

import io
import json

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image, UnidentifiedImageError


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.size = int(params["size"])
        self.mean = np.array([float(x) for x in params["mean"].split(",")], dtype=np.float32)
        self.std = np.array([float(x) for x in params["std"].split(",")], dtype=np.float32)

    def prepare(self, blob: bytes) -> np.ndarray:
        image = Image.open(io.BytesIO(blob)).convert("RGB").resize((self.size, self.size), Image.BILINEAR)
        pixels = np.asarray(image, dtype=np.float32) / 255.0  # (H, W, 3) in [0, 1]
        return ((pixels - self.mean) / self.std).transpose(2, 0, 1)  # (3, H, W)

    def execute(self, requests):
        responses = []
        for request in requests:
            blobs = pb_utils.get_input_tensor_by_name(request, "image_bytes").as_numpy()  # (batch, 1) bytes
            try:
                images = np.stack([self.prepare(b) for b in blobs.reshape(-1)]).astype(np.float32)
            except (UnidentifiedImageError, OSError, ValueError) as e:
                why = "not an image Pillow can decode" if isinstance(e, UnidentifiedImageError) else str(e)
                error = pb_utils.TritonError(
                    f"image_bytes is not a PNG or JPEG image ({why})", pb_utils.TritonError.INVALID_ARG
                )
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("image", images)]))
        return responses
