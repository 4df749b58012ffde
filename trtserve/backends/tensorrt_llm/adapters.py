"""The LoRA adapters one TensorRT-LLM engine serves, and the `lora_config` its LLM is created with.

Where they come from: the engine dir's packed adapters (`build --lora`, lora/NAME, listed in the
options YAML's lora_config.lora_dir in packing order: a TensorRT engine's task ids 0..n-1), the run
config's `lora` option (adapters named at start), and Engine.load_adapter at run time. TensorRT-LLM
reads an adapter's files when a request first names its id, so adapters from outside the engine dir
are copied to a private dir first: what it reads is what the AdapterRef's hash says.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import threading
from pathlib import Path

from trtserve.backends.tensorrt_llm.lora import (
    ALL_MODULES,
    AdapterSpec,
    AdapterTable,
    Served,
    lora_config_options,
    read_adapter,
)
from trtserve.engine.adapters import AdapterRef, LoraConfig, adapter_files
from trtserve.engine.errors import UnsupportedError, UserError

LORA_OPTION = "lora_config"  # the LLM argument (and options YAML key)


class EngineAdapters:
    def __init__(self, engine_dir: Path, backend: str, options: dict, run: LoraConfig | None):
        """options: the engine dir's LLM-API options; run: the run config's `lora` option (None: unset)."""
        built = options.get(LORA_OPTION)
        self.table: AdapterTable | None = None
        self.llm_option: dict | None = None  # the LLM's lora_config; None: LoRA off
        self.loads = 0  # adapters registered (at start and at run time)
        self._dir: Path | None = None  # private copies of adapters from outside the engine dir
        self._copy_ids = itertools.count()
        self._lock = threading.Lock()
        if built is None and run is None:
            return
        if backend == "tensorrt" and built is None:
            raise UserError(
                f"{engine_dir} was built without LoRA adapters, so its TensorRT engine has no LoRA plugin; "
                "rebuild it with `trtserve build ... --backend tensorrt --lora NAME=DIR`, or remove `lora` "
                "from the run config's engine section"
            )
        packed = {Path(d).name: engine_dir / d for d in (built or {}).get("lora_dir", [])}
        limits = run or LoraConfig(**{k: built[k] for k in ("max_lora_rank", "max_loras", "max_cpu_loras")})
        if backend == "tensorrt":  # the plugin was sized at build: that rank and those modules at most
            modules, rank = list(built["lora_target_modules"]), min(limits.max_lora_rank, built["max_lora_rank"])
        else:  # the PyTorch backend builds LoRA layers for every module listed: all, so any adapter fits
            modules, rank = list(ALL_MODULES), limits.max_lora_rank
        self.table = AdapterTable(modules, rank)
        for name in packed.keys() & (run.adapters.keys() if run else set()):
            raise UserError(
                f"adapter {name} is packed in the engine dir and named again in the run config's lora.adapters; "
                "give the run config's adapter another name"
            )
        try:
            specs = [read_adapter(name, path) for name, path in packed.items()]  # pinned by the manifest
            specs += [self.prepare(name, path) for name, path in (run.adapters.items() if run else [])]
            for spec in specs:
                self.add(spec)
        except BaseException:
            self.close()  # the copies made so far
            raise
        capped = limits.model_copy(update={"max_lora_rank": rank})
        self.llm_option = lora_config_options(specs, capped, modules)

    def prepare(self, name: str, path: str | Path) -> AdapterSpec:
        """A private copy of the PEFT adapter at `path`, read and checked (UserError if it is not one).
        Safe to run off the event loop; nothing is registered until `add`."""
        if self.table is None:
            raise UnsupportedError(
                "this TensorRT-LLM engine serves no LoRA adapters; start it with the `lora` engine option "
                "(a TensorRT engine must also be built with `--lora NAME=DIR`)"
            )
        files = adapter_files(Path(path))  # UserError naming what is missing
        with self._lock:
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix="trtserve-trtllm-lora-"))
            dest = self._dir / f"{next(self._copy_ids)}-{name}"
        dest.mkdir()
        for filename, src in files.items():
            shutil.copyfile(src, dest / filename)
        return read_adapter(name, dest)

    def add(self, spec: AdapterSpec) -> AdapterRef:
        ref = self.table.add(spec)
        self.loads += 1
        return ref

    def remove(self, name: str) -> None:
        if self.table is None:
            raise UserError(f"no LoRA adapter named {name} is served; this engine serves none")
        self.table.remove(name)  # its copy stays until shutdown: submitted requests may still read it

    def lookup(self, ref: AdapterRef) -> Served:
        if self.table is None:
            raise UserError(
                f"this engine serves no LoRA adapters (asked for {ref.name}); start it with the `lora` option, "
                "or send the request to the base model"
            )
        return self.table.lookup(ref)

    def refs(self) -> list[AdapterRef]:
        return self.table.refs() if self.table is not None else []

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
