"""/v1/files and /v1/batches: thin routes over the state store (serve/batch/files.py, jobs.py)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Form, Query, Request, UploadFile
from fastapi.responses import Response

from trtserve.serve.batch import files, jobs
from trtserve.serve.batch.protocol import BatchCreate, batch_object, file_object, page, window_seconds
from trtserve.serve.errors import APIError, OpenAIErrorBody
from trtserve.state import StateStore

router = APIRouter()
_WHY = {
    400: "The request is invalid; the message names the field and how to fix it.",
    401: "The API key is missing or wrong.",
    404: "No such file or batch (or the server runs with --state-dir none).",
    409: "The file is a running batch's input, the batch has ended, or its Idempotency-Key is still running.",
    413: "The upload is larger than max_file_bytes.",
    422: "The Idempotency-Key was used with a different request.",
    503: "The server is draining; retry on another replica.",
}


def _errors(*statuses: int) -> dict:
    """OpenAPI `responses=`: the error statuses a route can answer, each with OpenAI's error body."""
    return {s: {"model": OpenAIErrorBody, "description": _WHY[s]} for s in (*statuses, 401, 503)}


_CONTENT = {200: {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}}


def _store(request: Request) -> StateStore:
    store = request.app.state.server.store
    if store is None:
        raise APIError(
            404, "this server runs with --state-dir none, so files and batches are off; start it with --state-dir DIR"
        )
    return store


def _runner(request: Request):
    return getattr(request.app.state, "batch_runner", None)


async def _file(store: StateStore, file_id: str):
    row = await store.call(files.get, store, file_id)
    if row is None:
        raise APIError(404, f"no file with id {file_id!r}", "file_id")
    return row


async def _batch(store: StateStore, batch_id: str):
    row = await store.call(jobs.get, store, batch_id)
    if row is None:
        raise APIError(404, f"no batch with id {batch_id!r}", "batch_id")
    return row


@router.post("/v1/files", responses=_errors(400, 404, 413))
async def upload(request: Request, file: UploadFile, purpose: Literal["batch"] = Form(...)):
    store = _store(request)
    limit = request.app.state.server.config.max_file_bytes
    if file.size is not None and file.size > limit:
        raise APIError(413, f"the file has {file.size} bytes; the limit is {limit} (max_file_bytes)", "file")
    src = file.file
    row = await store.call(
        files.add, store, files.new_id(), file.filename or "upload.jsonl", purpose, iter(lambda: src.read(1 << 20), b"")
    )
    return file_object(row)


@router.get("/v1/files", responses=_errors(400, 404))
async def list_files(
    request: Request,
    purpose: str | None = None,
    after: str | None = None,
    limit: int = Query(10000, ge=1, le=10000),
    order: Literal["asc", "desc"] = "desc",
):
    store = _store(request)
    rows = await store.call(files.listing, store, purpose, after, limit, order)
    return page([file_object(r) for r in rows[:limit]], len(rows) > limit)


@router.get("/v1/files/{file_id}", responses=_errors(404))
async def get_file(request: Request, file_id: str):
    return file_object(await _file(_store(request), file_id))


@router.get("/v1/files/{file_id}/content", responses=_CONTENT | _errors(404))
async def file_content(request: Request, file_id: str):
    store = _store(request)
    await _file(store, file_id)
    return Response(await store.call(files.read, store, file_id), media_type="application/octet-stream")


@router.delete("/v1/files/{file_id}", responses=_errors(404, 409))
async def delete_file(request: Request, file_id: str):
    store = _store(request)
    await _file(store, file_id)
    user = await store.call(files.user_of, store, file_id)
    if user is not None:
        raise APIError(409, f"file {file_id!r} is the input of batch {user}, which is still running; cancel it first")
    await store.call(files.delete, store, file_id)
    return {"id": file_id, "object": "file", "deleted": True}


@router.post("/v1/batches", responses=_errors(400, 404, 409, 413, 422))
async def create_batch(body: BatchCreate, request: Request):
    store = _store(request)
    src = await _file(store, body.input_file_id)
    if src["purpose"] != "batch":
        raise APIError(
            400,
            f"file {body.input_file_id!r} has purpose {src['purpose']!r}; upload input with purpose=batch",
            "input_file_id",
        )
    row = await store.call(jobs.create, store, body, window_seconds(body.completion_window))
    if (runner := _runner(request)) is not None:
        runner.poke()
    return batch_object(row)


@router.get("/v1/batches", responses=_errors(400, 404))
async def list_batches(request: Request, after: str | None = None, limit: int = Query(20, ge=1, le=100)):
    store = _store(request)
    rows = await store.call(jobs.listing, store, after, limit)
    return page([batch_object(r) for r in rows[:limit]], len(rows) > limit)


@router.get("/v1/batches/{batch_id}", responses=_errors(404))
async def get_batch(request: Request, batch_id: str):
    return batch_object(await _batch(_store(request), batch_id))


@router.post("/v1/batches/{batch_id}/cancel", responses=_errors(404, 409))
async def cancel_batch(request: Request, batch_id: str):
    store = _store(request)
    row = await _batch(store, batch_id)
    if row["status"] in ("completed", "failed", "expired", "cancelled"):
        raise APIError(
            409, f"batch {batch_id} has already ended ({row['status']}); only a running batch can be cancelled"
        )
    await store.call(jobs.set_status, store, batch_id, "cancelling", ("validating", "in_progress"))
    if (runner := _runner(request)) is not None:
        runner.poke()
    return batch_object(await _batch(store, batch_id))
