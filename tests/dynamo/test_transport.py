"""The KV byte transports (trtserve/dynamo/transport.py): bytes staged in one process are read, bit for
bit, by another; released bytes are gone; NIXL's host-memory READ where the nixl wheel loads."""

import multiprocessing as mp

import numpy as np
import pytest

from trtserve.dynamo.transport import ShmTransport, TransferError, make_transport


def _fetch_in_child(kind, where, nbytes, out):
    transport = make_transport(kind, 1 << 20)
    try:
        out.put(transport.fetch(where, nbytes))
    except TransferError as err:
        out.put(err)
    finally:
        transport.close()


def _fetch_elsewhere(kind, where, nbytes):
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_fetch_in_child, args=(kind, where, nbytes, out))
    child.start()
    try:
        return out.get(timeout=60)
    finally:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()


@pytest.mark.parametrize("kind", ["shm", "nixl"])
def test_staged_bytes_cross_processes_bit_for_bit(kind):
    if kind == "nixl":
        pytest.importorskip("nixl_cu12", reason="the nixl wheel is not installed")
    transport = make_transport(kind, 1 << 20)
    assert transport.name == kind
    data = np.random.default_rng(0).integers(0, 256, 300_001, dtype=np.uint8)
    try:
        where = transport.stage("k", memoryview(data))
        assert _fetch_elsewhere(kind, where, data.nbytes) == data.tobytes()
        transport.unstage("k")
        if kind == "shm":  # the segment is gone once released (NIXL's pool slot is simply reused)
            assert isinstance(_fetch_elsewhere(kind, where, data.nbytes), TransferError)
    finally:
        transport.close()


def test_shm_fetch_of_a_missing_segment_is_a_transfer_error():
    with pytest.raises(TransferError, match="gone"):
        ShmTransport().fetch({"transport": "shm", "segment": "trtserve-kv-none"}, 10)
