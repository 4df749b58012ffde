"""Reads a Hugging Face model directory: config.json, safetensors (single or sharded), tokenizer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from trtserve.build.experts import ExpertStacks
from trtserve.build.safetensors_io import SafetensorsFile
from trtserve.build.stored import StoredTensors
from trtserve.build.vision import text_family_of
from trtserve.engine.errors import UserError
from trtserve.engine.hashing import fingerprint
from trtserve.models.pooling import family_for_checkpoint

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
    "preprocessor_config.json",  # a vision-language model's image processor (kept; docs/vision.md)
    "processor_config.json",
)
_TORCH_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


class HFReader:
    def __init__(self, path: Path):
        self.path = path
        self.description = f"HF directory {path}"
        self.config_origin = "config.json"
        raw = _read_json(path / "config.json", "the model's config")
        # a pooling checkpoint (Qwen3ForSequenceClassification, Qwen3Model) reads as its family's causal LM
        # a vision-language checkpoint (LlavaForConditionalGeneration) reads as its text_config's family
        self.family = text_family_of(raw) or family_for_checkpoint(raw.get("architectures"), raw.get("model_type"))
        self.hf_config = _hf_config(path, raw)
        self._files = self._weight_files()
        self._where: dict[str, Path] = {}
        self._handles = {}
        for f in self._files:
            try:
                handle = SafetensorsFile(f)
            except (ValueError, OSError) as err:
                raise UserError(
                    f"weights file {f} is truncated or corrupted ({err}); re-download or re-save the checkpoint"
                ) from None
            self._handles[f] = handle
            for name in handle.keys():
                self._where[name] = f
        self._experts = ExpertStacks(self.family, self._where, self._shape)  # expert roles read stacked
        quant = raw.get("quantization_config") or {}
        method = quant.get("quant_method") if isinstance(quant, dict) else None
        # tensors kept inside others (gpt-oss's experts, MXFP4 or not) read under the family's names
        self._stored = StoredTensors(
            self.family, self._experts.names(), self._stacked_shape, self._stacked_load, method
        )
        dtype = getattr(self.hf_config, "dtype", None) or getattr(self.hf_config, "torch_dtype", None)
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype, None)
        self.auto_dtype = _TORCH_DTYPES.get(dtype, "float32")
        self._check_tokenizer()

    def _weight_files(self) -> list[Path]:
        index = self.path / "model.safetensors.index.json"
        if index.exists():
            weight_map = _read_json(index, "the safetensors index").get("weight_map")
            if not isinstance(weight_map, dict):
                raise UserError(f"{index} has no 'weight_map'; re-save the checkpoint with save_pretrained")
            files = sorted({self.path / v for v in weight_map.values()})
            for f in files:
                if not f.exists():
                    raise UserError(f"weights file {f} named in {index.name} is missing; download it again")
            return files
        files = sorted(self.path.glob("*.safetensors"))
        if files:
            return files
        if list(self.path.glob("*.bin")) or list(self.path.glob("*.pt")):
            raise UserError(
                f"{self.path} holds only PyTorch .bin weights; re-save them as safetensors "
                "(model.save_pretrained(dir, safe_serialization=True))"
            )
        raise UserError(f"no *.safetensors weights found in {self.path}; point MODEL at a complete HF model directory")

    def _check_tokenizer(self) -> None:
        if not any((self.path / f).exists() for f in ("tokenizer.json", "tokenizer.model", "vocab.json")):
            raise UserError(
                f"no tokenizer in {self.path} (tokenizer.json, tokenizer.model or vocab.json); copy the model's tokenizer files there"
            )

    def names(self) -> list[str]:
        return self._stored.names()

    def shape(self, name: str) -> tuple[int, ...]:
        return self._stored.shape(name)

    def load(self, name: str) -> torch.Tensor:
        return self._stored.load(name)

    def _stacked_shape(self, name: str) -> tuple[int, ...]:
        parts = self._experts.parts.get(name)
        return (len(parts), *self._shape(parts[0])) if parts else self._shape(name)

    def _shape(self, name: str) -> tuple[int, ...]:
        return self._handles[self._where[name]].shape(name)

    def _stacked_load(self, name: str) -> torch.Tensor:
        parts = self._experts.parts.get(name)
        return torch.stack([self._load(p) for p in parts]) if parts else self._load(name)

    def _load(self, name: str) -> torch.Tensor:
        try:
            return self._handles[self._where[name]].load(name)
        except (ValueError, OSError) as err:
            raise UserError(
                f"cannot read tensor {name} from {self._where[name]} ({err}); the file is corrupted, re-download it"
            ) from None

    def save_tokenizer(self, dest: Path) -> None:
        dest.mkdir(parents=True, exist_ok=True)
        for name in TOKENIZER_FILES:
            if (self.path / name).exists():
                shutil.copyfile(self.path / name, dest / name)

    def fingerprint(self) -> str:
        files = {f.name: f for f in self._files}
        files["config.json"] = self.path / "config.json"
        return fingerprint(files)


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(
            f"{path} is missing; {what} is required, point MODEL at a complete HF model directory"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read {path} ({err}); check the file's permissions and contents") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path} is not valid JSON ({err}); fix or re-download it") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} must hold a JSON object; fix or re-download it")
    return data


def _hf_config(path: Path, raw: dict):
    """transformers' config class for the model type, or for a family transformers does not know
    (one registered by a plugin or a test) the plain config holding config.json's keys."""
    from transformers import AutoConfig, PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        if raw.get("model_type") is not None and raw["model_type"] not in CONFIG_MAPPING:
            return PretrainedConfig(**raw)
        return AutoConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as err:  # transformers raises many types for bad configs
        why = " ".join(str(err).split())  # transformers' validation errors span lines: one sentence
        raise UserError(f"{path / 'config.json'} is not a valid transformers config ({why}); fix the file") from None
