"""Server-sent events and merging several generation streams into one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from trtserve.serve.generation import GenerationRun
from trtserve.text.outputs import TextDelta

DONE = "data: [DONE]\n\n"


def event(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


async def merged(runs: list[GenerationRun]) -> AsyncIterator[tuple[int, TextDelta]]:
    """Deltas of several runs as they arrive, tagged with the run's position.

    Leaving early cancels every run, which aborts its engine request.
    """
    if len(runs) == 1:
        async for d in runs[0].deltas():
            yield 0, d
        return
    q: asyncio.Queue = asyncio.Queue()
    end = object()

    async def pump(i: int, run: GenerationRun) -> None:
        try:
            async for d in run.deltas():
                await q.put((i, d))
        except BaseException as err:  # noqa: BLE001 - forwarded to the consumer
            await q.put(err)
        finally:
            await q.put(end)

    tasks = [asyncio.ensure_future(pump(i, r)) for i, r in enumerate(runs)]
    try:
        finished = 0
        while finished < len(runs):
            item = await q.get()
            if item is end:
                finished += 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
