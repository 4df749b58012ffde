"""`inference.GRPCInferenceService` (Triton's grpc_service.proto) over the KServe serving logic:
health, metadata, config, statistics, the repository RPCs, ModelInfer and ModelStreamInfer. The
shared-memory, trace and log-settings RPCs answer UNIMPLEMENTED."""

from __future__ import annotations

import grpc
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2_grpc
from tritonclient.grpc import service_pb2 as pb

from trtserve.serve.errors import APIError
from trtserve.serve.generation import collect_all
from trtserve.serve.grpc.calls import CallLog, check_id, unary, unknown_model
from trtserve.serve.grpc.stream import StreamSession
from trtserve.serve.grpc.tensors import infer_response, parameters, request_tensors
from trtserve.serve.kserve.infer import infer_call
from trtserve.serve.kserve.serving import VERSION, KServeServing
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

    def serving(self, name: str, version: str) -> KServeServing:
        """The serving logic, once `name` (and `version`, "" meaning the latest) is the served model."""
        if name != self.server.model_name or version not in ("", VERSION):
            raise unknown_model(name, version, self.server.model_name)
        return self.server.kserve

    # ---- health ------------------------------------------------------------------------------------
    @unary
    async def ServerLive(self, request, context, call: CallLog):
        return pb.ServerLiveResponse(live=self.server.alive)

    @unary
    async def ServerReady(self, request, context, call: CallLog):
        return pb.ServerReadyResponse(ready=self.server.is_ready)

    @unary
    async def ModelReady(self, request, context, call: CallLog):
        ours = request.name == self.server.model_name and request.version in ("", VERSION)
        return pb.ModelReadyResponse(ready=ours and self.server.is_ready)

    # ---- metadata and configuration ------------------------------------------------------------------
    @unary
    async def ServerMetadata(self, request, context, call: CallLog):
        return json_format.ParseDict(self.server.kserve.server_metadata(), pb.ServerMetadataResponse())

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
        if request.name:  # "" asks for every model
            self.serving(request.name, request.version)
        s = self.server.service.statistics
        stats = pb.ModelStatistics(
            name=self.server.model_name,
            version=VERSION,
            last_inference=s.last_inference_ms,
            inference_count=s.inference_count,
            execution_count=s.inference_count,  # each request runs as its own sequence
        )
        for name in ("success", "fail", "queue", "compute_infer", "compute_input", "compute_output"):
            d: Duration = getattr(s, name)
            getattr(stats.inference_stats, name).CopyFrom(pb.StatisticDuration(count=d.count, ns=d.ns))
        return pb.ModelStatisticsResponse(model_stats=[stats])

    # ---- model repository (one engine dir per server) ------------------------------------------------
    @unary
    async def RepositoryIndex(self, request, context, call: CallLog):
        s = self.server
        state = "READY" if s.loaded else ("UNAVAILABLE" if s.load_error else "LOADING")
        if request.ready and state != "READY":
            return pb.RepositoryIndexResponse()
        entry = pb.RepositoryIndexResponse.ModelIndex(
            name=s.model_name, version=VERSION, state=state, reason=s.load_error or ""
        )
        return pb.RepositoryIndexResponse(models=[entry])

    @unary
    async def RepositoryModelLoad(self, request, context, call: CallLog):
        if request.model_name != self.server.model_name:
            raise APIError(
                404,
                f"cannot load {request.model_name!r}: this server serves one engine dir "
                f"({self.server.model_name!r}); start another `trtserve run` for another model",
            )
        return pb.RepositoryModelLoadResponse()  # already loaded: loading it again changes nothing

    @unary
    async def RepositoryModelUnload(self, request, context, call: CallLog):
        if request.model_name != self.server.model_name:
            raise unknown_model(request.model_name, "", self.server.model_name)
        raise APIError(
            501,
            f"trtserve cannot unload the model it serves ({request.model_name!r}); stop the server (SIGTERM drains it)",
        )

    # ---- inference ------------------------------------------------------------------------------------
    @unary
    async def ModelInfer(self, request, context, call: CallLog):
        serving = self.serving(request.model_name, request.model_version)
        check_id(request.id)
        rid = request.id or call.rid
        call.rid = rid
        outputs = [o.name for o in request.outputs] or None
        ic = infer_call(request_tensors(request), parameters(request.parameters), outputs)
        runs = serving.start_infer(ic, rid, call.fields, "grpc", context.time_remaining())
        outs = await collect_all(runs)
        return infer_response(serving.svc.model_name, VERSION, request.id, serving.infer_arrays(ic, outs))

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
