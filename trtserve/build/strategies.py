"""One build strategy per backend, keyed by the names of trtserve/engine/backends.py:

    torch     checkpoint/ (the TensorRT-LLM unified checkpoint, rank files) and model.safetensors
    tensorrt  checkpoint/, then engine/ (what `trtllm-build` writes: config.json + rank{r}.engine) and
              llm_api_options.yaml; no torch weights
    trtllm    hf/ (the Hugging Face checkpoint, with ModelOpt's hf_quant_config.json if quantized)
              and llm_api_options.yaml (`trtllm-serve --extra_llm_api_options`); needs no TensorRT-LLM

tensorrt and trtllm plan for one TensorRT-LLM release (`capabilities.for_planning`: --trtllm-version,
else the installed one, else the newest), and the dry run says which.

Every engine dir also holds tokenizer/, config.json and manifest.json (build/builder.py writes those).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import yaml
from rich.console import Console

from trtserve.backends.tensorrt_llm import (
    build_plan,
    capabilities,
    compat,
    lora,
    model_support,
    serve_plan,
    speculative,
)
from trtserve.backends.tensorrt_llm.builder_rules import blackwell_problem
from trtserve.backends.tensorrt_llm.quant import quant_algos
from trtserve.build.config import BuildConfig
from trtserve.build.job import Job, Written
from trtserve.build.planner import BuildPlan
from trtserve.build.reader import CheckpointReader
from trtserve.build.tensors import tensors_for
from trtserve.engine.backends import BACKENDS
from trtserve.engine.errors import UserError
from trtserve.engine.layout import (
    CHECKPOINT_DIR,
    ENGINE_WEIGHTS,
    HF_DIR,
    OPTIONS_FILE,
    TOKENIZER_DIR,
    TRT_ENGINE_DIR,
    VISION_WEIGHTS,
    EngineBuildConfig,
)

HF_QUANT_CONFIG = "hf_quant_config.json"  # written by ModelOpt's unified HF export
_HF_FILES = ("config.json", "generation_config.json", HF_QUANT_CONFIG, "model.safetensors.index.json")


class _Strategy:
    """The defaults of planner.Strategy: accept everything, keep no source quantization, no dry run."""

    name: str
    has_dry_run = False  # --dry-run prints its plan and the equivalent TensorRT-LLM commands

    def accept(self, cfg: BuildConfig, reader: CheckpointReader) -> None:
        pass

    def source_quantization(self, reader: CheckpointReader) -> dict | None:
        return None

    def check_plan(self, plan: BuildPlan) -> None:
        pass

    def built_limits(self, limits: EngineBuildConfig, quantization: dict | None) -> EngineBuildConfig:
        return limits

    def check_gpu(self, quantization: dict | None, sm: str) -> None:
        """Refuse (UserError) what this backend cannot build for a GPU of compute capability `sm`."""

    def describe(self, plan: BuildPlan, out: Path) -> list[str] | None:
        return None

    def is_weights(self, rel: str) -> bool:
        """Whether the engine dir's file `rel` is one the backend loads as weights (`trtserve inspect`)."""
        return rel in (ENGINE_WEIGHTS, VISION_WEIGHTS)  # a vision model's tower and projector too


class TorchStrategy(_Strategy):
    name = "torch"

    def accept(self, cfg: BuildConfig, reader: CheckpointReader) -> None:
        if cfg.trtllm_version:
            raise UserError(
                "--trtllm-version plans a TensorRT-LLM build; add --backend tensorrt or --backend trtllm, or leave it out"
            )
        if cfg.speculative is not None:
            raise UserError(
                "speculative is a run-time option on the torch backend: remove it from the build config and set "
                "engine.speculative in the run config (or `trtserve run --speculative`)"
            )

    def prepare(self, plan: BuildPlan) -> Job:
        step = tensors_for(plan)
        return Job(lambda tmp, console: step.write(tmp, console, engine_weights=True))


class TensorrtStrategy(_Strategy):
    name = "tensorrt"
    has_dry_run = True

    def check_plan(self, plan: BuildPlan) -> None:
        build_plan.build_config(plan.limits, plan.quantization)  # refuses what trtllm-build cannot take
        _check_build_gpu(plan.quantization, _build_sm())
        compat.check_workflow(_release(plan), self.name, build=True)
        _check_model(plan.config, plan.reader, self.name)  # after the family's own backends check
        _lora_options(plan, tensorrt=True)  # refuses adapters TensorRT-LLM cannot apply
        _speculative(plan, self.name)  # refuses speculation: TensorRT engines cannot run it

    def check_gpu(self, quantization: dict | None, sm: str) -> None:
        _check_build_gpu(quantization, sm)

    def built_limits(self, limits: EngineBuildConfig, quantization: dict | None) -> EngineBuildConfig:
        """The limits with the FMHA flags builder.py will leave (so the engine dir's config.json says so)."""
        fmha = build_plan.fmha_flags(quantization, _build_sm())
        plugin = limits.plugin_config.model_copy(
            update={"context_fmha": fmha.context_fmha, "use_paged_context_fmha": fmha.use_paged_context_fmha}
        )
        return limits.model_copy(update={"plugin_config": plugin})

    def prepare(self, plan: BuildPlan) -> Job:
        from trtserve.backends.tensorrt_llm import install

        tllm = install.import_tensorrt_llm()  # before anything is written
        caps = capabilities.probe(tllm)
        _check_planned_is_installed(plan.config.trtllm_version, caps)
        compat.check_workflow(caps, self.name, build=True)
        if shutil.which("trtllm-build") is None:
            raise UserError(
                f"trtllm-build is not on PATH although tensorrt_llm imports; reinstall with `{install.INSTALL_COMMAND}`"
            )
        target = install.installed_target(tllm)
        if target.sm is None:
            raise UserError("--backend tensorrt builds on the GPU it will run on, and no CUDA GPU is visible")
        _check_build_gpu(plan.quantization, target.sm)
        step = tensors_for(plan)

        def write(tmp: Path, console: Console) -> Written:
            written = step.write(tmp, console, engine_weights=False)  # checkpoint/ as trtllm-build takes it
            argv = self._argv(plan, tmp, target.sm)
            result = subprocess.run(argv, stdout=subprocess.DEVNULL if console.quiet else None)
            if result.returncode != 0:
                raise UserError(f"trtllm-build failed with exit code {result.returncode} (its output is above)")
            built = json.loads((tmp / TRT_ENGINE_DIR / "config.json").read_text())["build_config"]["plugin_config"]
            options = serve_plan.tensorrt_runtime_options(plan.limits, _lora_options(plan, tensorrt=True), built)
            _write_options(tmp, options)  # chunked context and KV reuse as the engine trtllm-build wrote allows
            return written

        return Job(write, target.to_dict())

    def is_weights(self, rel: str) -> bool:
        return rel.startswith(TRT_ENGINE_DIR + "/") and rel.endswith(".engine")  # the TensorRT plans

    def _argv(self, plan: BuildPlan, out: Path, sm: str | None = None) -> list[str]:
        ckpt, engine = str(out / CHECKPOINT_DIR), str(out / TRT_ENGINE_DIR)
        flags = lora.build_flags(_adapters(plan), plan.model.dtype)
        tp = plan.config.tp_size
        return build_plan.trtllm_build_argv(plan.limits, plan.quantization, ckpt, engine, tp, flags, sm or _build_sm())

    def describe(self, plan: BuildPlan, out: Path) -> list[str]:
        caps, specs = _release(plan), _adapters(plan)
        packed = {"lora_plugin": plan.model.dtype, "lora": lora.build_lora_config(specs)} if specs else {}
        bc = build_plan.build_config(plan.limits, plan.quantization, **packed, sm=_build_sm())
        bc = json.dumps(bc, indent=2, sort_keys=True)
        options = serve_plan.tensorrt_runtime_options(plan.limits, _lora_options(plan, tensorrt=True))
        tok, engine, tp = str(out / TOKENIZER_DIR), str(out / TRT_ENGINE_DIR), plan.config.tp_size
        serve = serve_plan.trtllm_serve_argv(caps, "tensorrt", engine, tok, str(out / OPTIONS_FILE), tp)
        return [
            f"planned for {caps.label}",
            "TensorRT-LLM BuildConfig (engine/config.json build_config):",
            bc,
            *_options_lines(options),
            "equivalent commands:",
            "  # after trtserve writes checkpoint/ (the unified checkpoint) and tokenizer/:",
            "  " + shlex.join(self._argv(plan, out)),
            *_lora_note(plan, out),
            "  " + shlex.join(serve),
        ]


class TrtllmStrategy(_Strategy):
    name = "trtllm"
    has_dry_run = True

    def accept(self, cfg: BuildConfig, reader: CheckpointReader) -> None:
        if not Path(reader.path).is_dir():
            raise UserError(
                f"--backend trtllm serves a Hugging Face checkpoint with TensorRT-LLM's PyTorch backend, but MODEL "
                f"{reader.path} is not a Hugging Face directory; give one, or use --backend tensorrt or torch"
            )
        if cfg.quant:
            raise UserError(
                "--quant with --backend trtllm is not supported: that backend serves a Hugging Face checkpoint, so "
                "quantize it with ModelOpt's export_hf_checkpoint and pass that directory as MODEL, or use "
                "--backend tensorrt or torch with --quant"
            )
        _check_model(cfg, reader, self.name)  # the release's PyTorch backend must register the architecture

    def source_quantization(self, reader: CheckpointReader) -> dict | None:
        qfile = Path(reader.path) / HF_QUANT_CONFIG
        if not qfile.is_file():
            return None
        try:
            return json.loads(qfile.read_text()).get("quantization") or None
        except (OSError, json.JSONDecodeError, AttributeError) as err:
            raise UserError(f"{qfile} is not valid JSON ({type(err).__name__}); re-export the checkpoint") from None

    def check_plan(self, plan: BuildPlan) -> None:
        build_plan.build_config(plan.limits, plan.quantization)  # validates the quantization section
        serve_plan.llm_api_options(
            plan.limits, plan.quantization, _release(plan), _lora_options(plan, tensorrt=False), _speculative(plan)
        )

    def prepare(self, plan: BuildPlan) -> Job:
        from trtserve.backends.tensorrt_llm import install

        options = serve_plan.llm_api_options(
            plan.limits, plan.quantization, _release(plan), _lora_options(plan, tensorrt=False), _speculative(plan)
        )

        def write(tmp: Path, console: Console) -> Written:
            _copy_hf_checkpoint(Path(plan.reader.path), tmp / HF_DIR)
            _write_options(tmp, options)
            return Written(plan.model, 0, 0)

        return Job(write, install.installed_target().to_dict())  # what this host has, if anything: informational

    def is_weights(self, rel: str) -> bool:
        return rel.startswith(HF_DIR + "/") and rel.endswith(".safetensors")  # the HF checkpoint's

    def describe(self, plan: BuildPlan, out: Path) -> list[str]:
        caps, opts = _release(plan), str(out / OPTIONS_FILE)
        serve = serve_plan.trtllm_serve_argv(
            caps, "trtllm", str(out / HF_DIR), str(out / TOKENIZER_DIR), opts, plan.config.tp_size
        )
        options = serve_plan.llm_api_options(
            plan.limits, plan.quantization, caps, _lora_options(plan, tensorrt=False), _speculative(plan)
        )
        spec = plan.config.speculative
        return [
            f"planned for {caps.label}",
            *_options_lines(options),
            *(speculative.notes(spec, caps.line) if spec is not None else []),
            "equivalent commands:",
            *_lora_note(plan, out),
            "  " + shlex.join(serve),
        ]


STRATEGIES: dict[str, _Strategy] = {s.name: s for s in (TorchStrategy(), TensorrtStrategy(), TrtllmStrategy())}
assert set(STRATEGIES) == set(BACKENDS), "every backend of engine/backends.py needs a build strategy"


def _release(plan: BuildPlan) -> capabilities.Capabilities:
    """The TensorRT-LLM release the plan is for (metadata and tables only: nothing is imported)."""
    return capabilities.for_planning(plan.config.trtllm_version)


def _check_model(cfg: BuildConfig, reader: CheckpointReader, backend: str) -> None:
    """Refuse a model the planned TensorRT-LLM release cannot serve (model_support.MODELS, one sentence)."""
    hf, quant = model_support.hf_model_of(reader.hf_config.to_dict())  # a transformers PretrainedConfig
    hf = hf or list(reader.family.hf_architectures[:1])
    caps = capabilities.for_planning(cfg.trtllm_version)
    model_support.check_model(caps, backend, hf, reader.family.trtllm_architecture, quant)


def _adapters(plan: BuildPlan) -> list[lora.AdapterSpec]:
    """The `--lora NAME=DIR` adapters as TensorRT-LLM will see them, in the order given (a TensorRT
    engine's task ids); UserError for a dir or module TensorRT-LLM cannot take."""
    return [lora.read_adapter(name, path) for name, path in plan.config.lora.items()]


def _lora_options(plan: BuildPlan, tensorrt: bool) -> dict | None:
    """The options YAML's `lora_config` for the adapters packed under lora/NAME; None without --lora."""
    specs = _adapters(plan)
    return lora.packed_lora_config(specs, tensorrt) if specs else None


def _speculative(plan: BuildPlan, backend: str = "trtllm") -> dict | None:
    """The options YAML's `speculative_config`; None without `speculative` (UserError where it cannot run)."""
    spec = plan.config.speculative
    return None if spec is None else speculative.speculative_options(spec, _release(plan).line, backend)


def _lora_note(plan: BuildPlan, out: Path) -> list[str]:
    if not plan.config.lora:
        return []
    return [f"  # lora_config.lora_dir is relative to {out} (trtserve run resolves it there; run trtllm-serve from it)"]


def _build_sm() -> str | None:
    """The SM a --backend tensorrt build is for: this host's GPU 0 (trtllm-build builds on the GPU it runs on);
    None without one (the plan then assumes SM 8.9 or newer, short of Blackwell)."""
    from trtserve.backends.tensorrt_llm import install

    return install.installed_target().sm


def _check_build_gpu(quantization: dict | None, sm: str | None) -> None:
    algo, kv = quant_algos(quantization)
    problem = blackwell_problem(algo, kv, sm)
    if problem is not None:
        raise UserError(problem)


def _check_planned_is_installed(version: str | None, caps: capabilities.Capabilities) -> None:
    """A real --backend tensorrt build runs the installed trtllm-build: --trtllm-version must name its line."""
    if version and capabilities.release_line(version) != caps.line:
        raise UserError(
            f"--trtllm-version {version} plans for release line {capabilities.release_line(version)}, but this build "
            f"runs the installed {caps.label}; leave --trtllm-version out, or add --dry-run to only plan"
        )


def _options_lines(options: dict) -> list[str]:
    return [f"LLM-API options ({OPTIONS_FILE}):", yaml.safe_dump(options, sort_keys=True).rstrip()]


def _write_options(tmp: Path, options: dict) -> None:
    (tmp / OPTIONS_FILE).write_text(yaml.safe_dump(options, sort_keys=True))


def _copy_hf_checkpoint(src: Path, dest: Path) -> None:
    """The HF checkpoint's config and weights. Weights are hard-linked where the file system allows
    (a source edited in place is caught by the manifest's sha256 on load), copied otherwise."""
    dest.mkdir()
    names = [n for n in _HF_FILES if (src / n).is_file()] + sorted(x.name for x in src.glob("*.safetensors"))
    for name in names:
        try:
            os.link(src / name, dest / name)
        except OSError:
            shutil.copyfile(src / name, dest / name)
