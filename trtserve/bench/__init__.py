"""`trtserve bench`: a load generator for OpenAI-compatible, KServe and Triton gRPC endpoints.

workload.py        seeded request lists: random lengths, ShareGPT-like, shared prefixes
arrivals.py        Poisson / gamma arrival times
endpoints.py       request bodies and streamed-chunk parsing per front end
client.py          run_benchmark: send, stream, time every token
grpc_client.py     the gRPC transport (tritonclient.grpc.aio): ModelStreamInfer / ModelInfer
server_metrics.py  trtserve /metrics deltas and peaks over a run
stats.py           summarize: vLLM-keyed throughput, latency percentiles, goodput
report.py          the table printed by the CLI
"""
