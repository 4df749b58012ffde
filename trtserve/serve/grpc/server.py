"""The grpc.aio server: started in the app's lifespan on uvicorn's event loop, stopped before the
engine shuts down."""

from __future__ import annotations

import logging

import grpc
from tritonclient.grpc import service_pb2_grpc

from trtserve.engine.errors import UserError
from trtserve.serve.grpc.servicer import InferenceServicer
from trtserve.serve.state import ServerState

log = logging.getLogger(__name__)
GRACE = 1.0  # s open calls get at shutdown; the SIGTERM drain has already waited for in-flight requests


def address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def start(state: ServerState) -> grpc.aio.Server:
    cfg = state.config
    server = grpc.aio.server(
        options=[
            # grpc sets SO_REUSEPORT by default, which lets a second server share a busy port silently.
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", cfg.max_body_bytes),  # the HTTP body limit
            ("grpc.max_send_message_length", -1),
        ]
    )
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(InferenceServicer(state), server)
    where = address(cfg.host, cfg.grpc_port)
    try:
        port = server.add_insecure_port(where)
    except RuntimeError as err:
        raise UserError(f"cannot listen for gRPC on {where} ({err}); choose another --grpc-port") from None
    await server.start()
    log.info("gRPC (Triton GRPCInferenceService) on %s", address(cfg.host, port))
    return server


async def stop(server: grpc.aio.Server) -> None:
    await server.stop(GRACE)
