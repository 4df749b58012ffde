"""Opening an engine dir for the torch engine: verify, read config, load weights and tokenizer."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from trtserve.build.layout import ENGINE_WEIGHTS, TOKENIZER_DIR, EngineConfig, read_engine_config
from trtserve.build.manifest import Manifest, verify_engine_dir
from trtserve.errors import UserError
from trtserve.models.decoder import DecoderModel

log = logging.getLogger(__name__)


@dataclass
class LoadedEngine:
    path: Path
    manifest: Manifest
    config: EngineConfig
    model: DecoderModel
    tokenizer: object  # transformers tokenizer
    eos_token_ids: frozenset[int]


def load_engine(engine_dir: str | Path, device: str | None = None, deterministic: bool = False) -> LoadedEngine:
    from transformers import AutoTokenizer, GenerationConfig

    path = Path(engine_dir)
    manifest = verify_engine_dir(path)
    if manifest.backend != "torch":
        raise UserError(
            f"{path} was built for the {manifest.backend} backend, not torch; rebuild it with --backend torch"
        )
    config = read_engine_config(path)
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    log.info("loading %s weights from %s on %s", config.pretrained_config.dtype, path, dev)
    model = DecoderModel.load(
        path / ENGINE_WEIGHTS, config.pretrained_config, config.build_config.max_seq_len, dev, deterministic
    )
    tokenizer = AutoTokenizer.from_pretrained(str(path / TOKENIZER_DIR))
    eos = set()
    if tokenizer.eos_token_id is not None:
        eos.add(tokenizer.eos_token_id)
    try:
        gen_eos = GenerationConfig.from_pretrained(str(path / TOKENIZER_DIR)).eos_token_id
        eos.update(gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else [])
    except OSError:
        pass  # no generation_config.json
    return LoadedEngine(path, manifest, config, model, tokenizer, frozenset(eos))
