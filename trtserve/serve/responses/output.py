"""A reply's text, as it arrives, turned into Responses output items (`reasoning` with
`reasoning_text`, `message` with `output_text`, `function_call`) and the typed stream events that
build them. A non-streamed response feeds the whole text once, so both paths assemble the same items."""

from __future__ import annotations

import json
import uuid

from trtserve.serve.openai.reply import ReplyPlan, ReplyStream
from trtserve.serve.telemetry.tracing import NO_SPAN, RequestSpan


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def sse(event: dict) -> str:
    """One server-sent event, named by its type as OpenAI sends them."""
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False, separators=(',', ':'))}\n\n"


class Events:
    """Numbers each event (`sequence_number` counts from 0 over the whole stream)."""

    def __init__(self):
        self.seq = 0

    def __call__(self, type_: str, **fields) -> dict:
        event = {"type": type_, "sequence_number": self.seq, **fields}
        self.seq += 1
        return event


class OutputBuilder:
    """Output items of one reply; `feed` returns the events each piece of text adds."""

    def __init__(self, plan: ReplyPlan, events: Events, span: RequestSpan = NO_SPAN):
        """span: the request's, which gets the reply's `reply parse` span when it is recorded."""
        self.plan, self.ev = plan, events
        self.parser: ReplyStream = plan.stream(span)
        self.items: list[dict] = []
        self._open: dict | None = None  # the item still being written, if any
        self.done = False  # fed its final piece

    def feed(self, text: str, final: bool, status: str = "completed") -> list[dict]:
        """`status`: of the last item when `final` ("incomplete" when the reply was cut off)."""
        out: list[dict] = []
        reasoning, content, calls = self.parser.feed(text, final)
        if reasoning:
            self._reasoning(reasoning, out)
        if content:
            self._text(content, out)
        for call in calls:
            self._call(call, out)
        if final:
            self.done = True
            if not self.items:  # an empty reply is still one (empty) message
                self._open_message(out)
            self._close(out, status)
        return out

    # ---- reasoning items ---------------------------------------------------------------------
    def _reasoning(self, text: str, out: list[dict]) -> None:
        item = self._open if self._open is not None and self._open["type"] == "reasoning" else None
        if item is None:
            self._close(out, "completed")
            item = {"id": new_id("rs"), "type": "reasoning", "status": "in_progress", "summary": [], "content": []}
            self._add(item, out)
            item["content"].append({"type": "reasoning_text", "text": ""})
        item["content"][0]["text"] += text
        out.append(self.ev("response.reasoning_text.delta", **self._where(item), content_index=0, delta=text))

    # ---- message items -----------------------------------------------------------------------
    def _open_message(self, out: list[dict]) -> dict:
        item = {"id": new_id("msg"), "type": "message", "role": "assistant", "status": "in_progress", "content": []}
        self._add(item, out)
        part = {"type": "output_text", "text": "", "annotations": []}
        out.append(self.ev("response.content_part.added", **self._where(item), content_index=0, part=dict(part)))
        item["content"].append(part)
        return item

    def _text(self, text: str, out: list[dict]) -> None:
        item = self._open if self._open is not None and self._open["type"] == "message" else None
        if item is None:
            self._close(out, "completed")
            item = self._open_message(out)
        item["content"][0]["text"] += text
        out.append(self.ev("response.output_text.delta", **self._where(item), content_index=0, delta=text, logprobs=[]))

    # ---- function_call items -----------------------------------------------------------------
    def _call(self, delta: dict, out: list[dict]) -> None:
        """One chat `tool_calls` delta: the first of a call (it has an id) opens an item."""
        fn = delta.get("function", {})
        if "id" in delta:
            self._close(out, "completed")
            item = {
                "id": new_id("fc"),
                "type": "function_call",
                "status": "in_progress",
                "call_id": delta["id"],
                "name": fn.get("name", ""),
                "arguments": "",
            }
            self._add(item, out)
        item = self._open
        if item is None or item["type"] != "function_call" or not fn.get("arguments"):
            return
        item["arguments"] += fn["arguments"]
        out.append(self.ev("response.function_call_arguments.delta", **self._where(item), delta=fn["arguments"]))

    # ---- both --------------------------------------------------------------------------------
    def _add(self, item: dict, out: list[dict]) -> None:
        self.items.append(item)
        self._open = item
        out.append(self.ev("response.output_item.added", output_index=len(self.items) - 1, item=_copy(item)))

    def _close(self, out: list[dict], status: str) -> None:
        item, self._open = self._open, None
        if item is None:
            return
        where = self._where(item)
        if item["type"] == "message":
            part = item["content"][0]
            out.append(self.ev("response.output_text.done", **where, content_index=0, text=part["text"], logprobs=[]))
            out.append(self.ev("response.content_part.done", **where, content_index=0, part=dict(part)))
        elif item["type"] == "reasoning":
            text = item["content"][0]["text"]
            out.append(self.ev("response.reasoning_text.done", **where, content_index=0, text=text))
        else:
            out.append(self.ev("response.function_call_arguments.done", **where, arguments=item["arguments"]))
            status = "completed"  # a call is only ever sent whole
        item["status"] = status
        out.append(self.ev("response.output_item.done", output_index=where["output_index"], item=_copy(item)))

    def _where(self, item: dict) -> dict:
        return {"item_id": item["id"], "output_index": self.items.index(item)}


def _copy(item: dict) -> dict:
    """A snapshot for an event (the item goes on changing)."""
    return json.loads(json.dumps(item))


def usage(prompt_tokens: int, output_tokens: int, cached: int, reasoning: int = 0) -> dict:
    """reasoning: the output tokens the reasoning parser put in reasoning items."""
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt_tokens + output_tokens,
    }
