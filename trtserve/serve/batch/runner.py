"""BatchRunner: drives every active batch in the state store to a final status, resuming after a
restart from the first line not yet committed.

validating -> in_progress -> finalizing -> completed      (the input parsed; every line ran)
validating -> failed                                       (the input had problems, named by line)
in_progress -> cancelling -> cancelled                     (POST /cancel; in-flight lines are aborted)
in_progress -> expired                                     (completion_window passed)
Lines are committed one by one (jobs.record); output files are built from those rows when the
batch ends, so a line is written once whatever happens to the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid

from trtserve.serve.batch import files, jobs
from trtserve.serve.batch.execute import Retry, execute
from trtserve.serve.batch.lines import Task, parse
from trtserve.serve.batch.protocol import error_line, output_line
from trtserve.serve.state import ServerState
from trtserve.serve.telemetry.tracing import NO_SPAN, RequestSpan, operation_of
from trtserve.state import StateStore

log = logging.getLogger(__name__)
POLL_S = 1.0  # how often the runner looks for expired batches when nothing wakes it


class BatchRunner:
    def __init__(self, server: ServerState, store: StateStore):
        self.server, self.store = server, store
        self.slots = asyncio.Semaphore(server.config.batch_max_in_flight)  # shared by all batches
        self.wake = asyncio.Event()
        self.running: dict[str, asyncio.Task] = {}
        self.stop_reason: dict[str, str] = {}  # batch id -> "cancelled" | "expired" while stopping
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        tasks = [t for t in (self.task, *self.running.values()) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def poke(self) -> None:
        """A batch was created or cancelled: look now."""
        self.wake.set()

    async def _loop(self) -> None:
        while not self.server.repository.started:  # the start-up loads; a line retries while its model loads
            await asyncio.sleep(0.1)
        while True:
            self.wake.clear()
            try:
                await self._look()
            except Exception:  # a store error must not stop every batch for good
                log.exception("batch runner: looking for work failed; trying again")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), POLL_S)

    async def _look(self) -> None:
        for row in await self.store.call(jobs.active, self.store):
            bid = row["id"]
            if row["status"] == "cancelling" and bid in self.running:
                self._stop(bid, "cancelled")
            elif row["expires_at"] <= time.time() and bid in self.running:
                self._stop(bid, "expired")
            elif bid not in self.running and not self.server.draining:
                self.running[bid] = asyncio.create_task(self._run(bid))
                self.running[bid].add_done_callback(lambda _, b=bid: self._forget(b))

    def _forget(self, bid: str) -> None:
        self.running.pop(bid, None)
        self.stop_reason.pop(bid, None)

    def _stop(self, bid: str, reason: str) -> None:
        if bid not in self.stop_reason:
            self.stop_reason[bid] = reason
            self.running[bid].cancel()

    async def _run(self, bid: str) -> None:
        try:
            await self._advance(bid)
        except asyncio.CancelledError:
            reason = self.stop_reason.get(bid)
            if reason is None:
                raise  # the server is stopping: the batch resumes on the next start
            await asyncio.shield(self._finalize(bid, reason))
        except Exception:
            log.exception("batch %s: the runner failed; it is retried on the next look", bid)
            await asyncio.sleep(POLL_S)

    async def _advance(self, bid: str) -> None:
        row = await self.store.call(jobs.get, self.store, bid)
        if row["status"] == "cancelling":
            return await self._finalize(bid, "cancelled")
        if row["expires_at"] <= time.time():
            return await self._finalize(bid, "expired")
        if row["status"] == "finalizing":
            return await self._finalize(bid, "completed")
        data = await self.store.call(files.read, self.store, row["input_file_id"])
        tasks, errors = parse(data, row["endpoint"])
        if row["status"] == "validating":
            if errors:
                body = json.dumps([e.as_dict() for e in errors])
                await self.store.call(jobs.set_status, self.store, bid, "failed", ("validating",), errors=body)
                return
            await self.store.call(jobs.set_status, self.store, bid, "in_progress", ("validating",), total=len(tasks))
        done = await self.store.call(jobs.done_lines, self.store, bid)
        todo = [t for t in tasks if t.line not in done]
        if todo:
            log.info("batch %s: %d of %d lines to run", bid, len(todo), len(tasks))
        await self._traced_lines(bid, row["endpoint"], todo)
        if await self.store.call(jobs.set_status, self.store, bid, "finalizing", ("in_progress",)):
            await self._finalize(bid, "completed")

    async def _traced_lines(self, bid: str, endpoint: str, todo: list[Task]) -> None:
        """Run the lines under one span of the job's run (a new trace: no request waits on it); each line
        is a child span, its generation under it (docs/observability.md). A run resumed after a restart is a new
        trace with the same trtserve.batch_id."""
        attrs = {"trtserve.batch_id": bid, "trtserve.batch.endpoint": endpoint, "trtserve.batch.lines": len(todo)}
        job = self.server.tracing.job_span(f"batch {bid}", attrs, operation_of(endpoint))
        status = "cancelled"  # what the span says unless every line ran
        try:
            await self._lines(bid, endpoint, todo, job)
            status = "completed"
        finally:
            job.end(self.stop_reason.get(bid, status), status == "completed")

    async def _lines(self, bid: str, endpoint: str, todo: list[Task], job: RequestSpan = NO_SPAN) -> None:
        queue = iter(todo)

        async def worker():
            for task in queue:  # shared by the workers: each line is taken once
                await self._line(bid, endpoint, task, job)

        workers = [asyncio.create_task(worker()) for _ in range(min(len(todo), self.server.config.batch_max_in_flight))]
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _line(self, bid: str, endpoint: str, task: Task, job: RequestSpan = NO_SPAN) -> None:
        attrs = {"trtserve.batch.custom_id": task.custom_id, "trtserve.batch.line": task.line}
        span = job.child(f"batch line {task.custom_id}", attrs)
        try:
            status = await self._run_line(bid, endpoint, task, span)
        except BaseException:
            span.end("cancelled", False)
            raise
        span.end(status, 200 <= status < 500)

    async def _run_line(self, bid: str, endpoint: str, task: Task, span: RequestSpan) -> int:
        """Run one line until the server takes it, and commit its result; -> its HTTP status."""
        while True:
            if self.server.draining:  # take no new line: the drain waits for in-flight ones, the rest resume later
                await asyncio.sleep(0.5)
                continue
            async with self.slots:
                try:
                    status, request_id, body = await execute(self.server, endpoint, task.body, span)
                    break
                except Retry:
                    pass
            await asyncio.sleep(0.5)  # queue full or draining: back off without holding a slot
        line_id = "batch_req_" + uuid.uuid4().hex
        result = output_line(line_id, task.custom_id, status, request_id, body)
        await self.store.call(jobs.record, self.store, bid, task.line, 200 <= status < 300, result)
        return status

    async def _finalize(self, bid: str, status: str) -> None:
        """Write the output and error files from the committed lines, then the final status.
        File ids are derived from the batch id, so finalizing twice (a crash here) is harmless."""
        row = await self.store.call(jobs.get, self.store, bid)
        if row["status"] in ("completed", "failed", "expired", "cancelled"):
            return
        ok = await self.store.call(jobs.results, self.store, bid, True)
        bad = await self.store.call(jobs.results, self.store, bid, False)
        if status == "expired":
            bad += await self._unfinished(bid, row)
        out_id = await self._write(f"file-{bid}-output", f"{bid}_output.jsonl", ok)
        err_id = await self._write(f"file-{bid}-errors", f"{bid}_error.jsonl", bad)
        await self.store.call(jobs.finish, self.store, bid, status, out_id, err_id)
        log.info("batch %s: %s (%d ok, %d failed)", bid, status, len(ok), len(bad))

    async def _unfinished(self, bid: str, row) -> list[str]:
        """Error-file lines for the requests an expired batch never ran (OpenAI's batch_expired)."""
        data = await self.store.call(files.read, self.store, row["input_file_id"])
        tasks, _ = parse(data, row["endpoint"])
        done = await self.store.call(jobs.done_lines, self.store, bid)
        message = "This request could not be executed before the completion window expired."
        return [
            json.dumps(error_line("batch_req_" + uuid.uuid4().hex, t.custom_id, "batch_expired", message))
            for t in tasks
            if t.line not in done
        ]

    async def _write(self, file_id: str, filename: str, lines: list[str]) -> str | None:
        if not lines:
            return None
        chunks = [(line + "\n").encode() for line in lines]
        await self.store.call(files.add, self.store, file_id, filename, "batch_output", chunks)
        return file_id
