"""`trtserve build --backend tensorrt|trtllm [--dry-run]`: engine dirs for TensorRT-LLM.

    tensorrt  ENGINE_DIR/checkpoint/ (our unified checkpoint, as for torch), engine/ (what
              `trtllm-build` writes: config.json + rank{r}.engine), tokenizer/, llm_api_options.yaml
    trtllm    ENGINE_DIR/hf/ (the Hugging Face checkpoint, with ModelOpt's hf_quant_config.json if
              quantized), tokenizer/, llm_api_options.yaml (`trtllm-serve --extra_llm_api_options`)

Both also hold config.json (our engine description) and manifest.json (with the TensorRT /
TensorRT-LLM / CUDA versions and the GPU when they are known). `--dry-run` needs neither
TensorRT-LLM nor a GPU: it resolves the plan and prints it with the equivalent command lines.
Writing a `trtllm` dir needs nothing from TensorRT-LLM either; `tensorrt` runs `trtllm-build`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from trtserve.backends.tensorrt_llm import build_plan, serve_plan
from trtserve.build.config import BuildConfig
from trtserve.build.layout import ENGINE_CONFIG, ENGINE_WEIGHTS, TOKENIZER_DIR, EngineBuildConfig, EngineConfig
from trtserve.build.manifest import MANIFEST, read_manifest, write_manifest
from trtserve.build.output import check_target, staged_dir
from trtserve.errors import UserError
from trtserve.models.config import ModelConfig

TRT_ENGINE_DIR = "engine"  # trtllm-build's output: config.json + rank{r}.engine
HF_DIR = "hf"
OPTIONS_FILE = "llm_api_options.yaml"
HF_QUANT_CONFIG = "hf_quant_config.json"  # written by ModelOpt's unified HF export
_HF_FILES = ("config.json", "generation_config.json", HF_QUANT_CONFIG, "model.safetensors.index.json")


@dataclass
class TrtllmPlan:
    backend: str  # "tensorrt" | "trtllm"
    config: BuildConfig  # resolved: dtype, max_seq_len and model path filled in
    model: ModelConfig
    limits: EngineBuildConfig
    quantization: dict | None  # the checkpoint's quantization section, if quantized
    reader: object  # the CheckpointReader

    def options(self) -> dict:
        if self.backend == "trtllm":
            return serve_plan.llm_api_options(self.limits, self.quantization)
        return serve_plan.tensorrt_runtime_options(self.limits)

    def commands(self, out: Path) -> list[list[str]]:
        tok, opts = str(out / TOKENIZER_DIR), str(out / OPTIONS_FILE)
        if self.backend == "trtllm":
            return [serve_plan.trtllm_serve_argv("trtllm", str(out / HF_DIR), tok, opts, self.config.tp_size)]
        engine = str(out / TRT_ENGINE_DIR)
        build = build_plan.trtllm_build_argv(
            self.limits, self.quantization, str(out / "checkpoint"), engine, self.config.tp_size
        )
        return [build, serve_plan.trtllm_serve_argv("tensorrt", engine, tok, opts, self.config.tp_size)]


def plan(cfg: BuildConfig) -> TrtllmPlan:
    """Resolve what a TensorRT-LLM build would do, reading only the checkpoint's metadata."""
    from trtserve.build.builder import resolve_limits
    from trtserve.build.convert import check_tp
    from trtserve.build.source import open_checkpoint

    if not cfg.model:
        raise UserError("no MODEL given; pass it as an argument or set `model:` in the --config file")
    reader = open_checkpoint(cfg.model)
    if cfg.backend == "trtllm" and not Path(reader.path).is_dir():
        raise UserError(
            f"--backend trtllm serves a Hugging Face checkpoint with TensorRT-LLM's PyTorch backend, but MODEL "
            f"{reader.path} is not a Hugging Face directory; give one, or use --backend tensorrt or torch"
        )
    dtype = reader.auto_dtype if cfg.dtype == "auto" else cfg.dtype
    model = reader.family.model_config(reader.hf_config, dtype)
    model.mapping.tp_size = model.mapping.world_size = cfg.tp_size
    check_tp(model, cfg.tp_size)
    limits = resolve_limits(cfg, model)
    quantization = _requested_quantization(cfg) or _quantization(cfg.backend, Path(reader.path), model)
    resolved = cfg.model_copy(update={"dtype": dtype, "max_seq_len": limits.max_seq_len, "model": str(reader.path)})
    p = TrtllmPlan(cfg.backend, resolved, model, limits, quantization, reader)
    build_plan.build_config(limits, quantization)  # validates the quantization for both targets
    p.options()
    return p


def _requested_quantization(cfg: BuildConfig) -> dict | None:
    """`--quant` for TensorRT engines: the `quantization` section our converter writes for trtllm-build."""
    if not cfg.quant:
        return None
    if cfg.backend == "trtllm":
        raise UserError(
            "--quant with --backend trtllm is not supported: that backend serves a Hugging Face checkpoint, so "
            "quantize it with ModelOpt's export_hf_checkpoint and pass that directory as MODEL, or use "
            "--backend tensorrt or torch with --quant"
        )
    from trtserve.quant.formats import FORMATS, KV_FORMATS

    fmt = FORMATS[cfg.quant].with_group_size(cfg.group_size)
    q: dict = {"quant_algo": fmt.quant_algo}
    if cfg.kv_cache_quant:
        q["kv_cache_quant_algo"] = KV_FORMATS[cfg.kv_cache_quant][0]
    if fmt.block > 1:
        q["group_size"] = fmt.block
    return q


def _quantization(backend: str, src: Path, model: ModelConfig) -> dict | None:
    if backend == "trtllm":
        qfile = src / HF_QUANT_CONFIG
        if not qfile.is_file():
            return None
        try:
            return json.loads(qfile.read_text()).get("quantization") or None
        except (OSError, json.JSONDecodeError, AttributeError) as err:
            raise UserError(f"{qfile} is not valid JSON ({type(err).__name__}); re-export the checkpoint") from None
    q = model.quantization.model_dump(exclude_none=True)
    return q or None


def describe(p: TrtllmPlan, out: Path) -> str:
    """The plan as text: what would be built, the resolved settings, the equivalent commands."""
    lines = [
        f"plan: {p.backend} engine dir {out} for {p.model.architecture} from {p.reader.description}",
        f"  dtype {p.model.dtype}, tp_size {p.config.tp_size}, quantization {json.dumps(p.quantization)}",
        "  resolved build config: " + json.dumps(p.config.model_dump(mode="json"), sort_keys=True),
    ]
    if p.backend == "tensorrt":
        bc = json.dumps(build_plan.build_config(p.limits, p.quantization), indent=2, sort_keys=True)
        lines += ["TensorRT-LLM BuildConfig (engine/config.json build_config):", bc]
    lines += [f"LLM-API options ({OPTIONS_FILE}):", yaml.safe_dump(p.options(), sort_keys=True).rstrip()]
    lines.append("equivalent commands:")
    if p.backend == "tensorrt":
        lines.append("  # after trtserve writes checkpoint/ (the unified checkpoint) and tokenizer/:")
    lines += ["  " + shlex.join(c) for c in p.commands(out)]
    return "\n".join(lines)


def build(cfg: BuildConfig, out: Path, *, force: bool = False, quiet: bool = False) -> Path:
    """Write the engine dir atomically; nothing is left behind on any failure."""
    p = plan(cfg)
    check_target(out, force)
    if p.backend == "tensorrt":
        return _build_tensorrt(p, out, force, quiet)
    return _build_trtllm(p, out, force)


def _common_files(p: TrtllmPlan, tmp: Path) -> None:
    import trtserve

    (tmp / OPTIONS_FILE).write_text(yaml.safe_dump(p.options(), sort_keys=True))
    engine_cfg = EngineConfig(
        version=f"trtserve-{trtserve.__version__}", pretrained_config=p.model, build_config=p.limits
    )
    (tmp / ENGINE_CONFIG).write_text(json.dumps(engine_cfg.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")


def _build_trtllm(p: TrtllmPlan, out: Path, force: bool) -> Path:
    """Copy the HF checkpoint and write the options; no TensorRT-LLM needed.

    Weights are hard-linked where the file system allows (a source edited in place is caught by
    the manifest's sha256 on load), copied otherwise.
    """
    from trtserve.backends.tensorrt_llm import install

    src = Path(p.reader.path)
    with staged_dir(out, force) as tmp:
        hf = tmp / HF_DIR
        hf.mkdir()
        names = [n for n in _HF_FILES if (src / n).is_file()] + sorted(x.name for x in src.glob("*.safetensors"))
        for name in names:
            _link_or_copy(src / name, hf / name)
        p.reader.save_tokenizer(tmp / TOKENIZER_DIR)
        _common_files(p, tmp)
        write_manifest(
            tmp,
            backend="trtllm",
            target_device="cuda",
            source={"kind": type(p.reader).__name__, "path": str(src), "fingerprint": p.reader.fingerprint()},
            build_config=p.config.model_dump(mode="json"),
            target=install.installed_target().to_dict(),  # what this host has, if anything; informational here
        )
    return out


def _build_tensorrt(p: TrtllmPlan, out: Path, force: bool, quiet: bool) -> Path:
    """Our unified checkpoint (the torch build's converter), then `trtllm-build` on it."""
    from trtserve.backends.tensorrt_llm import install
    from trtserve.build.builder import build_engine

    tllm = install.import_tensorrt_llm()  # before anything is written
    if shutil.which("trtllm-build") is None:
        raise UserError(
            f"trtllm-build is not on PATH although tensorrt_llm imports; reinstall with `{install.INSTALL_COMMAND}`"
        )
    target = install.installed_target(tllm)
    if target.sm is None:
        raise UserError("--backend tensorrt builds on the GPU it will run on, and no CUDA GPU is visible")
    with staged_dir(out, force) as tmp:
        stage = tmp / "stage"
        build_engine(p.config, stage, quiet=quiet)  # checkpoint/, tokenizer/, model.safetensors, manifest
        built = read_manifest(stage)
        argv = build_plan.trtllm_build_argv(
            p.limits, p.quantization, str(stage / "checkpoint"), str(stage / TRT_ENGINE_DIR), p.config.tp_size
        )
        result = subprocess.run(argv, stdout=None if not quiet else subprocess.DEVNULL)
        if result.returncode != 0:
            raise UserError(f"trtllm-build failed with exit code {result.returncode} (its output is above)")
        for name in (ENGINE_WEIGHTS, MANIFEST, ENGINE_CONFIG):  # the torch weights are not needed here
            (stage / name).unlink()
        for child in stage.iterdir():
            child.rename(tmp / child.name)
        stage.rmdir()
        _common_files(p, tmp)
        write_manifest(
            tmp,
            backend="tensorrt",
            target_device="cuda",
            source=built.source,
            build_config=built.build_config,
            target=target.to_dict(),
        )
    return out


def _link_or_copy(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)
