"""`inference.GRPCInferenceService` (Triton's grpc_service.proto) over the KServe serving logic:
health, metadata, config, statistics, the repository RPCs, ModelInfer and ModelStreamInfer. The
shared-memory, trace and log-settings RPCs answer UNIMPLEMENTED."""

from __future__ import annotations

from collections.abc import Callable

import grpc
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2_grpc
from tritonclient.grpc import service_pb2 as pb

from trtserve.serve.errors import APIError
from trtserve.serve.group import collect_all
from trtserve.serve.grpc.calls import CallLog, check_admin, check_id, metadata_of, unary, unknown_model
from trtserve.serve.grpc.stream import StreamSession
from trtserve.serve.grpc.tensors import infer_response, infer_tensor, parameters, request_tensors
from trtserve.serve.kserve.infer import infer_call
from trtserve.serve.kserve.serving import KServeServing
from trtserve.serve.repository.admin import version_parameter
from trtserve.serve.repository.kinds import FrontEnd, Tensors
from trtserve.serve.repository.lookup import refuse, version_ready
from trtserve.serve.repository.repository import Repository
from trtserve.serve.repository.router import parse_target
from trtserve.serve.repository.version import ModelVersion
from trtserve.serve.state import ServerState
from trtserve.serve.tensors.serving import TensorServing
from trtserve.serve.tensors.statistics import model_stats

UNSUPPORTED = (
    "SystemSharedMemoryStatus",
    "SystemSharedMemoryRegister",
    "SystemSharedMemoryUnregister",
    "CudaSharedMemoryStatus",
    "CudaSharedMemoryRegister",
    "CudaSharedMemoryUnregister",
    "TraceSetting",
    "LogSettings",
)


def _tensor_metadata(mv: ModelVersion, repo: Repository) -> dict:
    return TensorServing.of(mv).model_metadata([str(v.version) for v in repo.models[mv.model].ready_versions()])


# How each kind's tensors are described (serve/repository/kinds.py's `tensors`)
_METADATA: dict[Tensors, Callable[[ModelVersion, Repository], dict]] = {
    Tensors.TEXT: lambda mv, repo: KServeServing(mv.service).model_metadata(),
    Tensors.CONFIG: _tensor_metadata,
}
_CONFIG: dict[Tensors, Callable[[ModelVersion], dict]] = {
    Tensors.TEXT: lambda mv: KServeServing(mv.service).model_config(),
    Tensors.CONFIG: lambda mv: TensorServing.of(mv).model_config(),
}


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, server: ServerState):
        self.server = server

    def routed(self, name: str, version: str, call: CallLog | None = None) -> ModelVersion:
        """The version the repository routes `name` (`name:V`, `name@L`) and `version` ("": the
        routing choice) to, an LLM's or a tensor model's; Triton's not-found message if there is none."""
        repo = self.server.repository
        try:
            mv = repo.route(name, None, version or None)
        except APIError as err:
            if err.status == 404:
                raise unknown_model(name, version, ", ".join(repo.models)) from None
            raise
        if call is not None:
            call.context.routed(mv.model, mv.version)
        return mv

    def serving(self, name: str, version: str, call: CallLog | None = None) -> KServeServing:
        """The LLM serving logic of the routed version (a tensor model is a 400 naming ModelInfer)."""
        mv = self.routed(name, version, call)
        refuse(mv, FrontEnd.GENERATE)
        return KServeServing(mv.service)

    # ---- health ------------------------------------------------------------------------------------
    @unary
    async def ServerLive(self, request, context, call: CallLog):
        return pb.ServerLiveResponse(live=self.server.alive)

    @unary
    async def ServerReady(self, request, context, call: CallLog):
        return pb.ServerReadyResponse(ready=self.server.is_ready)

    @unary
    async def ModelReady(self, request, context, call: CallLog):
        try:
            ready = version_ready(self.server.repository, request.name, request.version or None)
        except APIError:
            ready = False  # unknown model or version: not ready
        return pb.ModelReadyResponse(ready=ready and not self.server.draining)

    # ---- metadata and configuration ------------------------------------------------------------------
    @unary
    async def ServerMetadata(self, request, context, call: CallLog):
        return json_format.ParseDict(KServeServing.server_metadata(), pb.ServerMetadataResponse())

    @unary
    async def ModelMetadata(self, request, context, call: CallLog):
        mv = self.routed(request.name, request.version)
        refuse(mv, FrontEnd.INFER)
        meta = _METADATA[mv.kind.tensors](mv, self.server.repository)
        return json_format.ParseDict(meta, pb.ModelMetadataResponse())

    @unary
    async def ModelConfig(self, request, context, call: CallLog):
        mv = self.routed(request.name, request.version)
        refuse(mv, FrontEnd.INFER)
        cfg = _CONFIG[mv.kind.tensors](mv)
        return pb.ModelConfigResponse(config=json_format.ParseDict(cfg, model_config_pb2.ModelConfig()))

    @unary
    async def ModelStatistics(self, request, context, call: CallLog):
        """Triton's: an empty name asks for every loaded version of every model."""
        repo = self.server.repository
        try:
            entries = model_stats(repo, parse_target(request.name).model if request.name else None, request.version)
        except APIError as err:
            if err.status == 404:
                raise unknown_model(request.name, request.version, ", ".join(repo.models)) from None
            raise
        return json_format.ParseDict({"model_stats": entries}, pb.ModelStatisticsResponse())

    # ---- model repository (serve/repository/) --------------------------------------------------------
    @unary
    async def RepositoryIndex(self, request, context, call: CallLog):
        entries = self.server.repository.index(ready_only=request.ready)
        return pb.RepositoryIndexResponse(models=[pb.RepositoryIndexResponse.ModelIndex(**e) for e in entries])

    @unary
    async def RepositoryModelLoad(self, request, context, call: CallLog):
        """Needs the admin key (in `authorization`) when the server has one, as over HTTP."""
        check_admin(self.server, metadata_of(context), context.peer())
        version = version_parameter(parameters(request.parameters))
        await self.server.repository.load(request.model_name, version)
        return pb.RepositoryModelLoadResponse()

    @unary
    async def RepositoryModelUnload(self, request, context, call: CallLog):
        check_admin(self.server, metadata_of(context), context.peer())
        version = version_parameter(parameters(request.parameters))
        await self.server.repository.unload(request.model_name, version)
        return pb.RepositoryModelUnloadResponse()

    # ---- inference ------------------------------------------------------------------------------------
    @unary
    async def ModelInfer(self, request, context, call: CallLog):
        mv = self.routed(request.model_name, request.model_version, call)
        check_id(request.id)
        refuse(mv, FrontEnd.INFER)
        if mv.kind.tensors is Tensors.CONFIG:  # the tensors of its config: one answer, no GenerationService
            call.rid = request.id or call.rid
            arrays = await infer_tensor(TensorServing.of(mv), request)
            return infer_response(mv.model, str(mv.version), request.id, arrays)
        serving = KServeServing(mv.service)
        rid = request.id or call.rid
        call.rid = rid
        outputs = [o.name for o in request.outputs] or None
        ic = infer_call(request_tensors(request), parameters(request.parameters), outputs, serving.svc.model_name)
        runs = await serving.start_infer(ic, rid, call.context, "grpc", context.time_remaining())
        outs = await collect_all(runs)
        resp = infer_response(serving.svc.model_name, serving.svc.version, request.id, serving.infer_arrays(ic, outs))
        resp.parameters["receipt"].string_param = ",".join(r.receipt_id for r in runs)
        return resp

    async def ModelStreamInfer(self, request_iterator, context):
        async for response in StreamSession(self, context).run(request_iterator):
            yield response


def _unsupported(name: str):
    async def handler(self, request, context):
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            f"{name} is not supported by trtserve (no shared-memory tensors, tracing or log settings over gRPC)",
        )

    handler.__name__ = name
    return handler


for _name in UNSUPPORTED:
    setattr(InferenceServicer, _name, _unsupported(_name))
