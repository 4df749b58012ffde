"""The app's Responses feature: the stored responses (in the state store) and the background ones
still running in this process, for GET, DELETE and cancel."""

from __future__ import annotations

import asyncio

from trtserve.serve.errors import APIError
from trtserve.serve.responses import store as rows
from trtserve.state import StateStore


class Responses:
    def __init__(self, store: StateStore | None):
        self.store = store  # None: nothing is stored (--state-dir none)
        self.tasks: dict[str, asyncio.Future] = {}  # background responses running here, by id

    async def get(self, response_id: str) -> rows.Stored | None:
        if self.store is None:
            return None
        return await self.store.call(rows.get, self.store, response_id)

    async def find(self, response_id: str) -> rows.Stored:
        stored = await self.get(response_id)
        if stored is None:
            why = "" if self.store is not None else " (this server keeps no state: --state-dir none)"
            raise APIError(404, f"no response {response_id!r}{why}", "response_id")
        return stored

    def running(self, response_id: str, task: asyncio.Future) -> None:
        self.tasks[response_id] = task
        task.add_done_callback(lambda _: self.tasks.pop(response_id, None))

    async def cancel(self, response_id: str) -> dict:
        """A queued or running background response -> cancelled; a finished one is answered as it is."""
        stored = await self.find(response_id)
        if not stored.background:
            raise APIError(400, "only responses created with background: true can be cancelled", "response_id")
        if stored.body["status"] not in rows.UNFINISHED:
            return stored.body
        task = self.tasks.get(response_id)
        if task is not None:
            task.cancel()  # aborts its engine request and gives its admission ticket back
        body = {**stored.body, "status": "cancelled"}
        if await self.store.call(rows.finish, self.store, body):
            return body
        return (await self.find(response_id)).body  # it finished first

    async def delete(self, response_id: str) -> dict:
        await self.find(response_id)
        task = self.tasks.get(response_id)
        if task is not None:
            task.cancel()
        await self.store.call(rows.delete, self.store, response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    async def input_items(self, response_id: str, limit: int, order: str, after: str | None) -> dict:
        """The conversation's input items up to this response (earlier turns' outputs included), paged."""
        items = (await self.find(response_id)).context
        if order == "desc":
            items = items[::-1]
        if after is not None:
            ids = [i.get("id") for i in items]
            if after not in ids:
                raise APIError(400, f"after: {after!r} is not an input item of {response_id!r}", "after")
            items = items[ids.index(after) + 1 :]
        page = items[:limit]
        return {
            "object": "list",
            "data": page,
            "first_id": page[0].get("id") if page else None,
            "last_id": page[-1].get("id") if page else None,
            "has_more": len(items) > limit,
        }
