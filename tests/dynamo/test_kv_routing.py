"""Dynamo's KV router routes by trtserve's prefix cache: a frontend (--router-mode kv) and two aggregated
workers publishing their KV events. Each worker is first given a prompt of its own (pinned to it); every
repeat of a prompt then lands on the worker that holds its prefix, which serves it from its cache."""

import re

import pytest
from dynamo_cluster import Cluster, reference_greedy
from helpers import random_prompts

BLOCK = 16  # tiny_llama_engine's tokens_per_block
PROMPT_LEN = 64


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, tiny_llama_engine):
    c = Cluster(tmp_path_factory.mktemp("dynamo-kv"), tiny_llama_engine)
    try:
        c.add_worker("a", "aggregated")
        c.add_worker("b", "aggregated")
        c.ready()
        yield c
    finally:
        c.stop()


def _instance_id(worker) -> int:
    """The worker's Dynamo instance id, from the labels on its /metrics (hexadecimal there)."""
    _, text = worker.get("/metrics")
    return int(re.search(r'worker_id="([0-9a-f]+)"', text).group(1), 16)


def test_repeated_prefix_lands_on_the_worker_holding_it(cluster, tiny_llama_engine):
    labels = sorted(cluster.workers)
    ids = {label: _instance_id(cluster.workers[label]) for label in labels}
    prompts = random_prompts(len(labels), seed=21, lo=PROMPT_LEN, hi=PROMPT_LEN + 1)
    expected = reference_greedy(tiny_llama_engine, prompts, 6)
    for label, prompt, want in zip(labels, prompts, expected, strict=True):
        tokens, where = cluster.complete(prompt, 6, nvext_extra={"backend_instance_id": ids[label]})
        assert tokens == want and where["decode_worker_id"] == ids[label]
    for _ in range(3):
        for label, prompt, want in zip(labels, prompts, expected, strict=True):
            tokens, where = cluster.complete(prompt, 6)
            assert tokens == want
            assert where["decode_worker_id"] == ids[label], "a repeat went to the worker without its prefix"
    # every repeat reused its prompt's full blocks before the last token, on its own worker
    reused = (PROMPT_LEN - 1) // BLOCK * BLOCK
    for label in labels:
        assert cluster.workers[label].metric("trtserve_dynamo_prefix_hit_tokens_total") == 3 * reused
