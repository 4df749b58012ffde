"""The model directory a Dynamo worker registers: the engine dir's tokenizer and chat template, and an
HF-style config.json, with no weights.

Dynamo's frontend tokenizes, applies the chat template and detokenizes from this directory (its
`tokenizer.json`, `tokenizer_config.json` with `chat_template`, bos and eos, `config.json`,
`generation_config.json`), so it must describe exactly the engine the worker runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from trtserve.engine.layout import TOKENIZER_DIR, read_engine_config
from trtserve.engine.rules import load_tokenizer

CHAT_TEMPLATE_FILE = "chat_template.jinja"  # where transformers 5 saves a tokenizer's chat template


def model_dir_for(engine_dir: Path, name: str, root: Path) -> Path:
    """Where the registration dir of `engine_dir` served as `name` lives under `root`: one path for every
    worker of that engine dir, since Dynamo refuses workers whose model cards (paths included) differ."""
    manifest = (engine_dir / "manifest.json").read_bytes()
    key = hashlib.blake2b(str(engine_dir.resolve()).encode() + manifest, digest_size=6).hexdigest()
    return root / f"{name}-{key}" / name


def write_model_dir(engine_dir: Path, dest: Path) -> Path:
    """Write the registration directory for `engine_dir` at `dest` unless a worker did already; returns dest.
    Written beside it and renamed into place, so a concurrent worker sees it whole or not at all."""
    if (dest / "generation_config.json").exists():
        return dest
    cfg = read_engine_config(engine_dir)
    src = engine_dir / TOKENIZER_DIR
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    tokenizer, eos = load_tokenizer(src)
    tok_cfg_path = tmp / "tokenizer_config.json"
    tok_cfg = json.loads(tok_cfg_path.read_text()) if tok_cfg_path.exists() else {}
    template = src / CHAT_TEMPLATE_FILE
    if "chat_template" not in tok_cfg and template.exists():
        tok_cfg["chat_template"] = template.read_text()
    tok_cfg["tokenizer_class"] = "PreTrainedTokenizerFast"  # what Dynamo's tokenizer.json reader expects
    tok_cfg_path.write_text(json.dumps(tok_cfg, indent=2))
    m = cfg.pretrained_config
    config = {
        "architectures": [m.architecture],
        "model_type": "llama",  # Dynamo reads the shape fields below, which every family here shares
        "vocab_size": m.vocab_size,
        "hidden_size": m.hidden_size,
        "num_hidden_layers": m.num_hidden_layers,
        "num_attention_heads": m.num_attention_heads,
        "num_key_value_heads": m.num_key_value_heads,
        "head_dim": m.head_size,
        "intermediate_size": m.intermediate_size,
        "max_position_embeddings": min(m.max_position_embeddings, cfg.build_config.max_seq_len),
        "torch_dtype": m.dtype,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": eos[0] if len(eos) == 1 else eos,
    }
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    generation = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": eos}
    (tmp / "generation_config.json").write_text(json.dumps(generation, indent=2))
    try:
        tmp.rename(dest)
    except OSError:  # another worker renamed its copy into place first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
