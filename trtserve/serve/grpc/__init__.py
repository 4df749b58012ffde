"""Triton / KServe v2 gRPC (`inference.GRPCInferenceService`) beside HTTP, on the same event loop,
engine, admission, metrics and logs. Needs the `grpc` extra (grpcio, tritonclient[grpc]): the
service and message modules are the ones the tritonclient wheel ships, so no proto is compiled.

server.py    start / stop the grpc.aio server (from the app's lifespan)
servicer.py  the RPCs over KServeServing
stream.py    ModelStreamInfer: many requests on one stream, one response per token delta
calls.py     auth, drain, status codes, access log and metric (serve/middleware.py's gRPC twin)
tensors.py   protobuf tensors and parameters <-> numpy
"""
