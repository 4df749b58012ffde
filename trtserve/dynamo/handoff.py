"""The prefill -> decode hand-off of a prompt's KV, between two Dynamo workers.

Dynamo forwards the prefill worker's `disaggregated_params` to the decode worker but moves no KV. The
prefill worker holds the prompt's blocks in its engine (KVHold) and offers them on a small ZMQ socket
on loopback; the decode worker asks it to `pull` (the prefill engine copies the blocks out and the
transport stages them), reads the bytes through the transport, and says `release` (the prefill engine
frees its blocks). An offer nobody pulls is dropped after its hold time, when the engine frees the
blocks by itself. Every wait has a timeout: a dead prefill worker is an error the decode worker
handles (it computes the prompt itself), never a hang.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any

import zmq
import zmq.asyncio

from trtserve.dynamo.transport import KVTransport, ShmTransport, TransferError
from trtserve.engine.kv_transfer import KVHandle, KVPayload
from trtserve.engine.protocol import Engine

log = logging.getLogger(__name__)
PARAMS_KEY = "trtserve"  # our entry in disaggregated_params (the dict is opaque to Dynamo)
PULL_TIMEOUT_S = 5.0  # a live prefill worker answers within one engine step and a copy
RELEASE_TIMEOUT_S = 2.0


class HandoffServer:
    """The prefill worker's side: offers, pulls and releases of held prompt KV."""

    def __init__(self, engine: Engine, transport: KVTransport, host: str = "127.0.0.1"):
        self.engine, self.transport = engine, transport
        self._ctx = zmq.asyncio.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self.address = f"tcp://{host}:{self._sock.bind_to_random_port(f'tcp://{host}')}"
        self._offers: dict[str, KVHandle] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._serve())

    @property
    def outstanding(self) -> int:
        return len(self._offers)

    def offer(self, handle: KVHandle, hold_s: float) -> dict[str, Any]:
        """Offer a finished prefill's held KV; returns our entry of disaggregated_params."""
        key = uuid.uuid4().hex
        self._offers[key] = handle
        self._timers[key] = asyncio.get_running_loop().call_later(hold_s, self.release, key)
        return {
            "key": key,
            "address": self.address,
            "num_tokens": handle.num_tokens,
            "first_token": handle.first_token,
            "transport": self.transport.name,
        }

    def release(self, key: str) -> None:
        handle = self._offers.pop(key, None)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if handle is not None:
            self.engine.release_kv(handle)
        self.transport.unstage(key)

    async def _serve(self) -> None:
        while True:
            ident, _, body = await self._sock.recv_multipart()
            asyncio.get_running_loop().create_task(self._answer(ident, json.loads(body)))

    async def _answer(self, ident: bytes, msg: dict[str, Any]) -> None:
        try:
            reply = await self._pull(msg["key"]) if msg.get("op") == "pull" else self._release(msg["key"])
        except Exception as err:  # the decode side gets the reason and computes the prompt itself
            reply = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        await self._sock.send_multipart([ident, b"", json.dumps(reply).encode()])

    async def _pull(self, key: str) -> dict[str, Any]:
        handle = self._offers.get(key)
        if handle is None:
            return {"ok": False, "error": "the KV is no longer offered (released or its hold ran out)"}
        payload = await self.engine.export_kv(handle)
        where = await asyncio.to_thread(self.transport.stage, key, payload.data)
        if key not in self._offers:  # released while it was staged
            self.transport.unstage(key)
            return {"ok": False, "error": "the KV was released while it was staged"}
        meta = {"fingerprint": payload.fingerprint, "num_tokens": payload.num_tokens}
        meta |= {"shape": list(payload.shape), "dtype": payload.dtype, "nbytes": payload.nbytes}
        return {"ok": True, "meta": meta, "where": where}

    def _release(self, key: str) -> dict[str, Any]:
        self.release(key)
        return {"ok": True}

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for key in list(self._offers):
            self.release(key)
        self._sock.close(0)
        self._ctx.term()


class HandoffClient:
    """The decode worker's side."""

    def __init__(self, transport: KVTransport):
        self.transport = transport
        self._ctx = zmq.asyncio.Context()

    async def _ask(self, address: str, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(address)
            await sock.send_multipart([b"", json.dumps(msg).encode()])
            _, body = await asyncio.wait_for(sock.recv_multipart(), timeout)
            return json.loads(body)
        except TimeoutError:
            raise TransferError(f"the prefill worker at {address} did not answer within {timeout:.0f} s") from None
        finally:
            sock.close(0)

    async def pull(self, params: dict[str, Any], timeout: float = PULL_TIMEOUT_S) -> KVPayload:
        reply = await self._ask(params["address"], {"op": "pull", "key": params["key"]}, timeout)
        if not reply.get("ok"):
            raise TransferError(reply.get("error", "the prefill worker refused the pull"))
        meta, where = reply["meta"], reply["where"]
        data = await asyncio.to_thread(self._transport_for(where).fetch, where, meta["nbytes"])
        shape = tuple(meta["shape"])
        return KVPayload(meta["fingerprint"], meta["num_tokens"], shape, meta["dtype"], data)

    def _transport_for(self, where: dict[str, Any]) -> KVTransport:
        """Ours, or shared memory when the prefill worker staged there (its NIXL did not load)."""
        if where.get("transport") == self.transport.name:
            return self.transport
        if where.get("transport") == ShmTransport.name:
            return ShmTransport()
        raise TransferError(f"the prefill worker staged KV with {where.get('transport')}, which this worker lacks")

    async def release(self, params: dict[str, Any]) -> None:
        """Tell the prefill worker to free the blocks; a gone worker freed them already."""
        try:
            await self._ask(params["address"], {"op": "release", "key": params["key"]}, RELEASE_TIMEOUT_S)
        except TransferError as err:
            log.info("releasing prefill KV: %s", err)

    def close(self) -> None:
        self._ctx.term()
