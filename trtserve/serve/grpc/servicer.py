"""`inference.GRPCInferenceService` (Triton's grpc_service.proto) over the KServe serving logic:
health, metadata, config, statistics, the repository RPCs, ModelInfer and ModelStreamInfer. The
shared-memory, trace and log-settings RPCs answer UNIMPLEMENTED."""

from __future__ import annotations

import grpc
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2_grpc
from tritonclient.grpc import service_pb2 as pb

from trtserve.serve.errors import APIError
from trtserve.serve.group import collect_all
from trtserve.serve.grpc.calls import CallLog, check_admin, check_id, metadata_of, unary, unknown_model
from trtserve.serve.grpc.stream import StreamSession
from trtserve.serve.grpc.tensors import infer_response, parameters, request_tensors
from trtserve.serve.kserve.infer import infer_call
from trtserve.serve.kserve.serving import KServeServing
from trtserve.serve.repository.admin import version_parameter
from trtserve.serve.repository.lookup import version_ready
from trtserve.serve.state import ServerState
from trtserve.serve.statistics import Duration

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


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, server: ServerState):
        self.server = server

    def serving(self, name: str, version: str, call: CallLog | None = None) -> KServeServing:
        """The serving logic of the version the repository routes `name` (`name:V`, `name@L`) and
        `version` ("": the routing choice) to; Triton's not-found message if there is none."""
        repo = self.server.repository
        try:
            mv = repo.route(name, None, version or None)
        except APIError as err:
            if err.status == 404:
                raise unknown_model(name, version, ", ".join(repo.models)) from None
            raise
        if call is not None:
            call.context.routed(mv.model, mv.version)
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
        meta = self.serving(request.name, request.version).model_metadata()
        return json_format.ParseDict(meta, pb.ModelMetadataResponse())

    @unary
    async def ModelConfig(self, request, context, call: CallLog):
        cfg = self.serving(request.name, request.version).model_config()
        return pb.ModelConfigResponse(config=json_format.ParseDict(cfg, model_config_pb2.ModelConfig()))

    @unary
    async def ModelStatistics(self, request, context, call: CallLog):
        serving = self.serving(request.name or self.server.model_name, request.version)
        s = serving.svc.statistics
        stats = pb.ModelStatistics(
            name=serving.svc.model_name,
            version=serving.svc.version,
            last_inference=s.last_inference_ms,
            inference_count=s.inference_count,
            execution_count=s.inference_count,  # each request runs as its own sequence
        )
        for name in ("success", "fail", "queue", "compute_infer", "compute_input", "compute_output"):
            d: Duration = getattr(s, name)
            getattr(stats.inference_stats, name).CopyFrom(pb.StatisticDuration(count=d.count, ns=d.ns))
        return pb.ModelStatisticsResponse(model_stats=[stats])

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
        serving = self.serving(request.model_name, request.model_version, call)
        check_id(request.id)
        rid = request.id or call.rid
        call.rid = rid
        outputs = [o.name for o in request.outputs] or None
        ic = infer_call(request_tensors(request), parameters(request.parameters), outputs, serving.svc.model_name)
        runs = serving.start_infer(ic, rid, call.context, "grpc", context.time_remaining())
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
