"""Opening an engine dir for the torch engine: verify, read config, load weights and tokenizer."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError

from trtserve.engine.errors import EngineIntegrityError, UserError
from trtserve.engine.layout import (
    ENGINE_WEIGHTS,
    POOLING_WEIGHTS,
    TOKENIZER_DIR,
    VISION_WEIGHTS,
    EngineConfig,
    read_engine_config,
)
from trtserve.engine.manifest import Manifest, verify_engine_dir
from trtserve.engine.options import EngineOptions, check_backend
from trtserve.engine.rules import load_tokenizer
from trtserve.models.decoder import DecoderModel
from trtserve.models.pooling import PoolingHead
from trtserve.models.vision import VisionEncoder
from trtserve.runtime.features.vision import NoVision, Vision

log = logging.getLogger(__name__)


@dataclass
class LoadedEngine:
    path: Path
    manifest: Manifest
    config: EngineConfig
    model: DecoderModel
    tokenizer: object  # transformers tokenizer
    eos_token_ids: frozenset[int]
    weights_seconds: float = 0.0  # reading (memory-mapping) the weights and building the model from them
    pooling: PoolingHead | None = None  # a pooling model's head (manifest.pooling); None: it generates
    vision: NoVision = field(default_factory=NoVision)  # its vision encoder and cache (manifest.vision); text: none


def default_device(device: str | None = None) -> torch.device:
    """`device`, or where the torch engine runs when none is given: CUDA if available, else the CPU."""
    return torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))


def load_engine(
    engine_dir: str | Path, device: str | None = None, options: EngineOptions | None = None
) -> LoadedEngine:
    """options: the run-time engine options (engine/options.py); the model refuses those it cannot honour."""
    path = Path(engine_dir)
    manifest = verify_engine_dir(path)
    if manifest.backend != "torch":
        raise UserError(
            f"{path} was built for the {manifest.backend} backend, not torch; rebuild it with --backend torch"
        )
    options = options or EngineOptions()
    check_backend(options, manifest.backend)
    config = read_engine_config(path)
    dev = default_device(device)
    log.info("loading %s weights from %s on %s", config.pretrained_config.dtype, path, dev)
    # The manifest is unsigned: a file edited together with its manifest entry passes verification,
    # so what cannot be a working engine is refused here, naming the file (tests/unit/test_build_robustness.py).
    rebuild = "rebuild the engine with `trtserve build ... --force`"
    start = time.perf_counter()
    try:
        model = DecoderModel.load(
            path / ENGINE_WEIGHTS,
            config.pretrained_config,
            config.build_config.max_seq_len,
            dev,
            options,
        )
    except SafetensorError as err:
        raise EngineIntegrityError(f"engine file {ENGINE_WEIGHTS} cannot be read ({err}); {rebuild}") from None
    cfg = config.pretrained_config
    if tuple(model.embed.shape) != (cfg.vocab_size, cfg.hidden_size):
        raise EngineIntegrityError(
            f"config.json says vocab {cfg.vocab_size} x hidden {cfg.hidden_size} but {ENGINE_WEIGHTS} holds an "
            f"embedding of {tuple(model.embed.shape)}; {rebuild}"
        )
    pooling = None if manifest.pooling is None else PoolingHead.load(manifest.pooling, path / POOLING_WEIGHTS, dev)
    vision = NoVision()
    if manifest.vision is not None:  # the tower and projector, with the encoder cache (features/vision.py)
        vision = Vision(VisionEncoder.load(path / VISION_WEIGHTS, manifest.vision, dev, cfg.dtype))
        if manifest.vision.bidirectional and model.deterministic:  # its attention has no two-way image spans
            raise UserError(f"deterministic mode does not run {manifest.vision.family}'s images; leave it off")
    weights_seconds = time.perf_counter() - start
    tokenizer, eos = load_tokenizer(path / TOKENIZER_DIR)
    return LoadedEngine(path, manifest, config, model, tokenizer, frozenset(eos), weights_seconds, pooling, vision)
