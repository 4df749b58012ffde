"""The gRPC transport of `trtserve bench --backend grpc`: Triton's protocol via tritonclient.grpc.aio
(the `grpc` extra), one channel (one HTTP/2 connection) for the whole run.

Streaming sends each request on its own ModelStreamInfer call with the `stream` input true, so every
token delta is one response (TTFT and ITL are timed on those, as on HTTP); `--no-stream` sends
ModelInfer. The inputs are the ones the kserve backend sends (endpoints.kserve_inputs).
"""

from __future__ import annotations

import time

import numpy as np

from trtserve.bench import endpoints
from trtserve.engine.errors import UserError


def _grpc():
    try:
        import tritonclient.grpc.aio as aio
        from tritonclient.utils import InferenceServerException
    except ImportError as err:
        raise UserError(f"--backend grpc needs tritonclient[grpc] ({err}); pip install 'trtserve[grpc]'") from None
    return aio, InferenceServerException


class GrpcTarget:
    """An open channel to `url` (HOST:PORT) and what every request on it shares."""

    def __init__(self, url: str, api_key: str | None, timeout: float):
        aio, self.error_type = _grpc()
        self.aio, self.url, self.timeout = aio, url, timeout
        self.client = aio.InferenceServerClient(url)
        self.headers = {"authorization": f"Bearer {api_key}"} if api_key else None

    async def check_reachable(self) -> None:
        try:
            await self.client.is_server_live(headers=self.headers, client_timeout=10.0)
        except self.error_type as err:
            raise UserError(
                f"cannot reach a gRPC server at {self.url} ({err.message()}); start it with --grpc-port or fix --grpc-url"
            ) from None

    async def close(self) -> None:
        await self.client.close()

    def _inputs(self, prompt: str, output_len: int, ignore_eos: bool, stream: bool) -> list:
        out = []
        for name, value in endpoints.kserve_inputs(prompt, output_len, ignore_eos, stream).items():
            if isinstance(value, str):
                kind, arr = "BYTES", np.array([[value.encode()]], dtype=np.object_)
            else:
                kind = "BOOL" if isinstance(value, bool) else "INT32"
                arr = np.array([[value]], dtype=np.bool_ if kind == "BOOL" else np.int32)
            t = self.aio.InferInput(name, [1, 1], kind)
            t.set_data_from_numpy(arr)
            out.append(t)
        return out

    async def send(self, model: str, prompt: str, output_len: int, ignore_eos: bool, stream: bool, res) -> None:
        """Fill `res` (a client.RequestResult) for one request."""
        try:
            if stream:
                await self._stream(model, self._inputs(prompt, output_len, ignore_eos, True), res)
            else:
                await self._infer(model, self._inputs(prompt, output_len, ignore_eos, False), res)
        except self.error_type as err:
            res.success, res.error = False, f"gRPC {err.status() or ''} {err.message()}".strip()

    async def _infer(self, model: str, inputs: list, res) -> None:
        start = time.perf_counter()
        result = await self.client.infer(model, inputs, headers=self.headers, client_timeout=self.timeout)
        res.latency = res.ttft = time.perf_counter() - start  # the whole output arrives at once
        res.text = result.as_numpy("text_output").reshape(-1)[0].decode("utf-8", "replace")
        res.output_tokens, res.success = res.output_len, True  # exact: ignore_eos is required without streaming

    async def _stream(self, model: str, inputs: list, res) -> None:
        async def one():
            yield {"model_name": model, "inputs": inputs}

        start = time.perf_counter()
        last, chunks = start, 0
        responses = self.client.stream_infer(one(), headers=self.headers, stream_timeout=self.timeout)
        async for result, error in responses:
            if error is not None:
                res.error = error.message()
                responses.cancel()
                return
            out = result.as_numpy("text_output")
            if out is None:  # an empty final response carries no token
                continue
            now = time.perf_counter()
            if chunks == 0:
                res.ttft = now - start
            else:
                res.itl.append(now - last)
            last, chunks = now, chunks + 1
            res.text += out.reshape(-1)[0].decode("utf-8", "replace")
        res.latency = time.perf_counter() - start
        res.output_tokens, res.success = chunks, chunks > 0  # one response per generated token
        if not res.success:
            res.error = "the stream ended without any token"
