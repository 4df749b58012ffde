"""The `responses` table (sync; call through `store.call` from asyncio). A row holds the response
object and its context: the input items of every turn up to and including its own, so a
`previous_response_id` conversation is one read."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from trtserve.state import StateStore

UNFINISHED = ("queued", "in_progress")


@dataclass
class Stored:
    body: dict  # the response object, as GET returns it
    context: list[dict]  # input items of the conversation so far (earlier outputs included), in order
    background: bool


def put(store: StateStore, body: dict, context: list[dict], background: bool) -> None:
    store.execute(
        "INSERT OR REPLACE INTO responses (id, created_at, status, background, context, body) VALUES (?, ?, ?, ?, ?, ?)",
        (body["id"], body["created_at"], body["status"], int(background), json.dumps(context), json.dumps(body)),
    )


def get(store: StateStore, response_id: str) -> Stored | None:
    row = store.query_one("SELECT context, body, background FROM responses WHERE id = ?", (response_id,))
    if row is None:
        return None
    return Stored(json.loads(row["body"]), json.loads(row["context"]), bool(row["background"]))


def finish(store: StateStore, body: dict) -> bool:
    """The final body of a background response, unless it was cancelled (or deleted) meanwhile."""
    marks = ", ".join("?" for _ in UNFINISHED)
    n = store.execute(
        f"UPDATE responses SET status = ?, body = ? WHERE id = ? AND status IN ({marks})",
        (body["status"], json.dumps(body), body["id"], *UNFINISHED),
    )
    return n > 0


def delete(store: StateStore, response_id: str) -> bool:
    return store.execute("DELETE FROM responses WHERE id = ?", (response_id,)) > 0


def fail_unfinished(store: StateStore) -> int:
    """At start-up: background responses the previous process was running died with it."""
    rows = store.query(
        f"SELECT id, body FROM responses WHERE status IN ({', '.join('?' for _ in UNFINISHED)})", UNFINISHED
    )
    for row in rows:
        body = json.loads(row["body"])
        body["status"] = "failed"
        body["error"] = {"code": "server_error", "message": "the server stopped before this response finished"}
        body["completed_at"] = None
        finish(store, body)
    return len(rows)


def now() -> int:
    """Unix seconds, as OpenAI's `created_at` and `completed_at` are."""
    return int(time.time())
