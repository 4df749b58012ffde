"""The vision encoder of a vision-language engine: a ViT tower (CLIP or SigLIP) and the MLP projector that
maps its patch rows into the language model's embedding space (LLaVA's), or a SigLIP tower's
post-layernormed last layer through Idefics3's pixel-shuffle connector or Gemma 3's pooling projector.
Numerics follow HF transformers: LayerNorms and attention as CLIPVisionModel / SiglipVisionModel /
Idefics3VisionTransformer, features taken from the hidden states `VisionTower.feature_layers` names, the
CLS row dropped under the "default" strategy.

Weights come from the engine's vision.safetensors (build/vision.py): the tower's HF module names under
`tower.`, the projector's under `projector.`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from trtserve.engine.vision import VisionConfig, VisionTower
from trtserve.models.dtypes import TORCH_DTYPES

TOWER, PROJECTOR = "tower.", "projector."
ACTIVATIONS = {
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
    "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
}


def tokens_per_image(t: VisionTower, scale_factor: int = 1) -> int:
    """Rows one image (tile) gives the prompt: its patches (scale_factor**2 of them a row after a pixel
    shuffle), the CLS row (CLIP) unless "default" drops it."""
    patches = (t.image_size // t.patch_size) ** 2 // scale_factor**2
    return patches + (1 if t.kind == "clip" else 0) - (1 if t.select == "default" else 0)


@dataclass
class _Layer:
    w: dict[str, torch.Tensor]  # the layer's tensors by HF name under its prefix


class VisionEncoder:
    def __init__(self, cfg: VisionConfig, weights: dict[str, torch.Tensor], device: torch.device, dtype: str):
        self.cfg, self.t = cfg, cfg.tower
        self.dtype = TORCH_DTYPES[dtype]
        w = {k: v.to(device=device, dtype=self.dtype) for k, v in weights.items()}
        n = self.t.num_layers
        # hidden-state indices as HF counts them: 0 the embeddings' output, k the output of layer k
        self.states = [i if i >= 0 else n + 1 + i for i in self.t.feature_layers]
        if not all(0 <= i <= n for i in self.states):
            raise ValueError(f"feature layers {self.t.feature_layers} outside a tower of {n} layers")
        self.w = w
        self.layers = [
            _Layer({k.split(".", 4)[4]: v for k, v in w.items() if k.startswith(f"{TOWER}encoder.layers.{i}.")})
            for i in range(max(self.states))
        ]
        self.act = ACTIVATIONS[self.t.act]
        self.projector_act = ACTIVATIONS.get(cfg.projector_act)
        self.device = device

    @classmethod
    def load(cls, path: Path, cfg: VisionConfig, device: torch.device, dtype: str) -> VisionEncoder:
        from safetensors.torch import load_file

        return cls(cfg, load_file(str(path)), device, dtype)

    @torch.inference_mode()
    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        """pixels (N, 3, H, W) float32 -> (N, tokens_per_image, text hidden) in the model dtype."""
        h = self._embeddings(pixels.to(self.device, self.dtype))  # (N, P[+1], hidden)
        states = [h]
        for layer in self.layers:
            h = self._layer(layer.w, h)
            states.append(h)
        x = torch.cat([states[i] for i in self.states], dim=-1)  # (N, rows, hidden * len(feature_layers))
        if self.cfg.projector == "pixel_shuffle":
            return self._connector(self._ln(x, TOWER + "post_layernorm"))
        if self.cfg.projector == "pool":
            return self._pool(self._ln(x, TOWER + "post_layernorm"))
        if self.t.select == "default":
            x = x[:, 1:]
        g = self.w.get
        x = F.linear(x, self.w[PROJECTOR + "linear_1.weight"], g(PROJECTOR + "linear_1.bias"))
        return F.linear(self.projector_act(x), self.w[PROJECTOR + "linear_2.weight"], g(PROJECTOR + "linear_2.bias"))

    def _connector(self, x: torch.Tensor) -> torch.Tensor:
        """Idefics3's pixel shuffle (each s x s block of patches -> one row, as HF orders it) and projection."""
        n, seq, dim = x.shape
        side, s = int(seq**0.5), self.cfg.scale_factor
        x = x.view(n, side, side // s, dim * s).permute(0, 2, 1, 3)
        x = x.reshape(n, side // s, side // s, dim * s * s).permute(0, 2, 1, 3)
        return F.linear(
            x.reshape(n, seq // (s * s), dim * s * s), self.w[PROJECTOR + "modality_projection.proj.weight"]
        )

    def _pool(self, x: torch.Tensor) -> torch.Tensor:
        """Gemma 3's projector: patches average-pooled to tokens_per_image, Gemma's RMSNorm, projected."""
        n, seq, dim = x.shape
        side = int(seq**0.5)
        kernel = side // int(self.cfg.tokens_per_image**0.5)
        x = F.avg_pool2d(x.transpose(1, 2).reshape(n, dim, side, side), kernel, kernel)
        x = x.flatten(2).transpose(1, 2)  # (N, tokens_per_image, dim)
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.t.layer_norm_eps)
        h = h * (1.0 + self.w[PROJECTOR + "mm_soft_emb_norm.weight"].float())  # Gemma's (1 + w), in float32
        return torch.matmul(h.to(x.dtype), self.w[PROJECTOR + "mm_input_projection_weight"])

    def _embeddings(self, pixels: torch.Tensor) -> torch.Tensor:
        w, g = self.w, self.w.get
        e = TOWER + "embeddings."
        x = F.conv2d(pixels, w[e + "patch_embedding.weight"], g(e + "patch_embedding.bias"), stride=self.t.patch_size)
        x = x.flatten(2).transpose(1, 2)  # (N, patches, hidden)
        if self.t.kind == "clip":
            cls = w[e + "class_embedding"].expand(x.shape[0], 1, -1)
            x = torch.cat([cls, x], dim=1)
        x = x + w[e + "position_embedding.weight"][: x.shape[1]]
        if self.t.kind == "clip":
            x = self._ln(x, TOWER + "pre_layrnorm")
        return x

    def _ln(self, x: torch.Tensor, name: str, w: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        w = w if w is not None else self.w
        return F.layer_norm(x, x.shape[-1:], w[name + ".weight"], w[name + ".bias"], self.t.layer_norm_eps)

    def _layer(self, w: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        n, rows, hidden = x.shape
        heads = self.t.num_heads
        y = self._ln(x, "layer_norm1", w)

        def proj(name: str) -> torch.Tensor:  # (N, heads, rows, head_dim)
            out = F.linear(y, w[f"self_attn.{name}.weight"], w[f"self_attn.{name}.bias"])
            return out.view(n, rows, heads, -1).transpose(1, 2)

        a = F.scaled_dot_product_attention(proj("q_proj"), proj("k_proj"), proj("v_proj"))  # bidirectional
        a = a.transpose(1, 2).reshape(n, rows, hidden)
        x = x + F.linear(a, w["self_attn.out_proj.weight"], w["self_attn.out_proj.bias"])
        y = self._ln(x, "layer_norm2", w)
        y = F.linear(
            self.act(F.linear(y, w["mlp.fc1.weight"], w["mlp.fc1.bias"])), w["mlp.fc2.weight"], w["mlp.fc2.bias"]
        )
        return x + y
