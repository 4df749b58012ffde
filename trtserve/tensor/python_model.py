"""Python steps: a version dir's model.py with Triton's `class TritonPythonModel` (initialize(args),
execute(requests) -> responses, finalize()), run in process on each instance's worker thread.

`import triton_python_backend_utils as pb_utils` in model.py resolves to trtserve/tensor/pb_utils.py,
so a model written for Triton's Python backend runs unchanged when it keeps to that API.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import logging
import sys
from pathlib import Path
from types import ModuleType

import numpy as np

from trtserve.engine.errors import UserError
from trtserve.tensor import pb_utils
from trtserve.tensor.batched import BatchedModel
from trtserve.tensor.types import DATATYPES, InvalidInput, ModelExecutionError, Resolver, TensorError, TensorModelConfig

log = logging.getLogger(__name__)
PB_UTILS_NAME = "triton_python_backend_utils"
_loads = itertools.count()  # each load gets a module name of its own: instances never share globals


def load_module(path: Path, model: str) -> ModuleType:
    """model.py as a fresh module (UserError naming the model when it is missing or fails to import)."""
    if not path.is_file():
        raise UserError(f"model {model!r}: {path} does not exist; a Python step needs its model.py there")
    sys.modules[PB_UTILS_NAME] = pb_utils
    spec = importlib.util.spec_from_file_location(f"trtserve_python_model_{next(_loads)}", path)
    module = importlib.util.module_from_spec(spec)
    # Triton puts the version dir on sys.path: model.py's top-level imports of its sibling files work
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the model's own code: say whose and what
        raise UserError(f"model {model!r}: importing {path} failed: {type(e).__name__}: {e}") from e
    finally:
        sys.path.remove(str(path.parent))
    if not isinstance(getattr(module, "TritonPythonModel", None), type):
        raise UserError(f"model {model!r}: {path} defines no class TritonPythonModel")
    return module


class PythonExecutor:
    """One instance of a Python step: its own TritonPythonModel object, driven by BatchedModel on
    that instance's worker thread (one thread per instance, so a model needs no locks)."""

    def __init__(self, config: TensorModelConfig, version_dir: Path, instance: int = 0):
        self.config = config
        path = Path(version_dir) / (config.default_model_filename or "model.py")
        module = load_module(path, config.name)
        self.model = module.TritonPythonModel()
        args = {
            "model_config": json.dumps(config.raw or {"name": config.name}),
            "model_instance_kind": "CPU",
            "model_instance_name": f"{config.name}_0_{instance}",
            "model_instance_device_id": "0",
            "model_repository": str(Path(version_dir).parent),
            "model_version": Path(version_dir).name,
            "model_name": config.name,
        }
        if hasattr(self.model, "initialize"):
            try:
                self.model.initialize(args)
            except Exception as e:  # the model's own code: say whose and what
                raise UserError(f"model {config.name!r}: initialize failed: {type(e).__name__}: {e}") from e
        self.outputs = [t.name for t in config.outputs]

    def execute(self, batch: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray] | TensorError]:
        requests = [
            pb_utils.InferenceRequest(
                request_id=str(i),
                inputs=[pb_utils.Tensor(k, v) for k, v in inputs.items()],
                requested_output_names=self.outputs,
                model_name=self.config.name,
            )
            for i, inputs in enumerate(batch)
        ]
        name = self.config.name
        try:
            responses = self.model.execute(requests)
        except Exception as e:  # the model's own code failed the whole batch
            return [ModelExecutionError(f"model {name!r}: execute failed: {type(e).__name__}: {e}") for _ in batch]
        if not isinstance(responses, list | tuple) or len(responses) != len(batch):
            got = f"{len(responses)} responses" if isinstance(responses, list | tuple) else repr(type(responses))
            why = f"execute returned {got} for {len(batch)} requests; it must return one InferenceResponse per request"
            return [ModelExecutionError(f"model {name!r}: {why}, in order") for _ in batch]
        return [self._outputs(r) for r in responses]

    def _outputs(self, response) -> dict[str, np.ndarray] | TensorError:
        name = self.config.name
        if not isinstance(response, pb_utils.InferenceResponse):
            return ModelExecutionError(
                f"model {name!r}: execute returned a {type(response).__name__}, not a pb_utils.InferenceResponse"
            )
        if response.has_error():
            # INVALID_ARG is the client's fault (Triton answers 400); any other code is the model's (500)
            err = response.error()
            cls = InvalidInput if err.code() == pb_utils.TritonError.INVALID_ARG else ModelExecutionError
            return cls(f"model {name!r}: {err.message()}")
        got = {t.name(): t.as_numpy() for t in response.output_tensors()}
        out = {}
        for spec in self.config.outputs:
            if spec.name not in got:
                return ModelExecutionError(f"model {name!r}: execute's response has no output {spec.name!r}")
            array = np.asarray(got[spec.name])
            if spec.datatype == "BYTES":
                # str / np.bytes_ elements travel as bytes, as Triton's BYTES tensors do
                array = np.vectorize(_as_bytes, otypes=[np.object_])(array) if array.size else array.astype(object)
            elif array.dtype != DATATYPES[spec.datatype][0]:
                return ModelExecutionError(
                    f"model {name!r}: output {spec.name!r} is {array.dtype}, but its config says {spec.datatype}"
                )
            out[spec.name] = array
        return out

    def close(self) -> None:
        if hasattr(self.model, "finalize"):
            try:
                self.model.finalize()
            except Exception:  # the unload goes on: its sessions and threads are released regardless
                log.exception("model %r: finalize failed", self.config.name)


def _as_bytes(item) -> bytes:
    return bytes(item) if isinstance(item, bytes) else str(item).encode("utf-8")


def open_python(config: TensorModelConfig, version_dir: Path, resolve: Resolver) -> BatchedModel:
    """The Python step with `instance_count` instances behind Triton's dynamic batcher."""
    executors: list[PythonExecutor] = []
    try:
        for i in range(max(1, config.instance_count)):
            executors.append(PythonExecutor(config, version_dir, i))
    except BaseException:
        for ex in executors:
            ex.close()
        raise
    return BatchedModel(config, executors)
