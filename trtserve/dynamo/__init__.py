"""trtserve on NVIDIA Dynamo (`trtserve dynamo`, extra `trtserve[dynamo]`, docs/dynamo.md).

    worker.py        the Dynamo worker over our Engine (roles aggregated, prefill, decode)
    mapping.py       Dynamo's request / response dicts <-> our typed messages (pure functions)
    kv_publisher.py  prefix-cache events -> Dynamo's KV router
    handoff.py       the prefill -> decode KV hand-off (offer, pull, release) over loopback ZMQ
    transport.py     how the KV bytes travel: shared memory (ours), nixl_transport.py (NIXL host memory)
    model_dir.py     the model directory the worker registers (tokenizer, chat template, config)
    trtllm.py        `python -m dynamo.trtllm` lines for engine dirs TensorRT-LLM runs
    metrics.py       the worker's counters on Dynamo's /metrics
    local.py         a frontend and workers as processes on loopback (tests, scripts/bench_dynamo.py)
    settings.py      one worker's settings

Only worker.py, metrics.py and the CLI import Dynamo (`dynamo`), so the rest imports without it.
"""
