"""manifest.json: what an engine dir holds and how it was made; verified on every load."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ValidationError

from trtserve.engine.errors import EngineIntegrityError, UserError
from trtserve.engine.hashing import sha256_file, sha256_file_once
from trtserve.engine.pooling import PoolingConfig
from trtserve.engine.vision import VisionConfig

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


class FileEntry(BaseModel):
    sha256: str
    size: int  # bytes


class Manifest(BaseModel):
    format_version: int = FORMAT_VERSION
    created_at: str  # the only field that differs between two builds of the same inputs
    backend: str  # "torch" | "tensorrt" (TensorRT engines) | "trtllm" (TensorRT-LLM's PyTorch backend)
    target_device: str  # what the engine was built for
    source: dict  # {"kind", "path", "fingerprint"}
    toolchain: dict[str, str]  # package -> version
    build_config: dict  # fully resolved BuildConfig
    files: dict[str, FileEntry]  # path relative to the engine dir -> entry
    # tensorrt / trtllm: {tensorrt_llm, tensorrt, cuda, gpu_name, sm} the engine was built with (None: none there)
    target: dict[str, str | None] | None = None
    pooling: PoolingConfig | None = None  # a pooling model's task and head (engine/pooling.py); None: an LLM
    vision: VisionConfig | None = None  # a vision-language model's images (engine/vision.py); None: text only


def engine_fingerprint(manifest: Manifest) -> str:
    """The engine's identity: a hash of its files' sha256s (created_at and paths outside it do not
    count). Roots prefix-cache keys and is what a receipt records and a replay checks."""
    files = sorted((k, v.sha256) for k, v in manifest.files.items())
    return hashlib.sha256(repr(files).encode()).hexdigest()


def write_manifest(
    engine_dir: Path,
    *,
    backend: str,
    target_device: str,
    source: dict,
    toolchain: dict[str, str],
    build_config: dict,
    target: dict | None = None,
    pooling: PoolingConfig | None = None,
    vision: VisionConfig | None = None,
) -> Manifest:
    """Hash every file of the (staged) engine dir into manifest.json. toolchain: package -> version
    of what built it (the build side knows; this package imports none of it)."""
    files = {}
    for p in sorted(engine_dir.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            files[p.relative_to(engine_dir).as_posix()] = FileEntry(sha256=sha256_file(p), size=p.stat().st_size)
    manifest = Manifest(
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        backend=backend,
        target_device=target_device,
        source=source,
        toolchain=toolchain,
        build_config=build_config,
        files=files,
        target=target,
        pooling=pooling,
        vision=vision,
    )
    data = manifest.model_dump(mode="json")
    if target is None:
        data.pop("target")  # torch engines: the manifest stays as before
    if pooling is None:
        data.pop("pooling")  # LLMs: the manifest stays as before
    if vision is None:
        data.pop("vision")  # text-only models: the manifest stays as before
    (engine_dir / MANIFEST).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return manifest


def read_manifest(engine_dir: Path) -> Manifest:
    path = engine_dir / MANIFEST
    if not engine_dir.is_dir():
        raise UserError(
            f"engine dir {engine_dir} does not exist; build one with `trtserve build MODEL -o {engine_dir}`"
        )
    if not path.is_file():
        raise UserError(
            f"{engine_dir} is not a trtserve engine dir (no {MANIFEST}); build one with `trtserve build MODEL -o {engine_dir}`"
        )
    try:
        manifest = Manifest.model_validate(json.loads(path.read_text()))
    except (json.JSONDecodeError, ValidationError, UnicodeDecodeError) as err:
        raise EngineIntegrityError(
            f"{path} is corrupted ({type(err).__name__}); rebuild the engine with `trtserve build ... --force`"
        ) from None
    if manifest.format_version != FORMAT_VERSION:
        raise UserError(
            f"{engine_dir} has manifest format {manifest.format_version}, this trtserve reads {FORMAT_VERSION}; rebuild the engine"
        )
    return manifest


def verify_engine_dir(engine_dir: Path) -> Manifest:
    """Check every file against the manifest; refuse a missing, truncated or modified one by name."""
    manifest = read_manifest(engine_dir)
    rebuild = "rebuild the engine with `trtserve build ... --force`"
    for rel, entry in manifest.files.items():
        p = engine_dir / rel
        if not p.is_file():
            raise EngineIntegrityError(f"engine file {rel} is missing from {engine_dir}; {rebuild}")
        size = p.stat().st_size
        if size != entry.size:
            what = "truncated" if size < entry.size else "modified"
            raise EngineIntegrityError(
                f"engine file {rel} is {what} ({size} bytes, manifest says {entry.size}); {rebuild}"
            )
        if sha256_file_once(p) != entry.sha256:
            raise EngineIntegrityError(f"engine file {rel} was modified (sha256 differs from the manifest); {rebuild}")
    return manifest
