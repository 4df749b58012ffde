"""One batch line through the same OpenAI serving path online requests take (same validation,
admission, engine and response builder), at the lowest priority."""

from __future__ import annotations

import uuid

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from trtserve.engine.errors import UserError
from trtserve.serve.context import RequestContext
from trtserve.serve.errors import APIError, describe_request_error, error_body
from trtserve.serve.openai import protocol as p
from trtserve.serve.openai.serving import OpenAIServing
from trtserve.serve.repository.kinds import FrontEnd
from trtserve.serve.repository.lookup import refuse
from trtserve.serve.state import ServerState
from trtserve.serve.telemetry.tracing import NO_SPAN, RequestSpan

# Below any online request's priority (the scheduler serves higher first and preempts lower first).
BATCH_PRIORITY = -1e9
REQUESTS = {"/v1/completions": p.CompletionRequest, "/v1/chat/completions": p.ChatCompletionRequest}


def serving_for(server: ServerState, model: str | None, user: str | None = None) -> OpenAIServing:
    """The OpenAI serving object that answers a line naming `model`, routed by the model
    repository exactly as an online request is (APIError 404 / 503 as online)."""
    mv = server.repository.route(model, user, None)
    refuse(mv, FrontEnd.GENERATE)  # a tensor model: the 400 naming its infer route, as online
    return OpenAIServing(mv.service)


class Retry(Exception):
    """The server refused for now (queue full, draining): run the line again later, record nothing."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


async def execute(server: ServerState, endpoint: str, body: dict, span: RequestSpan = NO_SPAN) -> tuple[int, str, dict]:
    """-> (HTTP status, request id, response body) exactly as the online endpoint would answer; the
    line's generation spans go under `span`. Raises Retry for 429/503, which say nothing about the request."""
    request_id = "req_" + uuid.uuid4().hex
    try:
        req = REQUESTS[endpoint].model_validate(body)
    except ValidationError as err:
        message, field = describe_request_error(RequestValidationError(err.errors()))
        return 400, request_id, error_body(endpoint, 400, message, field)
    if req.stream:
        return 400, request_id, error_body(endpoint, 400, "stream is not supported in a batch; leave it out", "stream")
    try:
        model = req.lora_request.lora_name if req.lora_request is not None else req.model  # an adapter is a model
        serving = serving_for(server, model, req.user)
        if serving.svc.engine.info.capabilities.priorities:  # elsewhere the in-flight cap alone keeps it polite
            req.priority = BATCH_PRIORITY
        handler = serving.completions if endpoint == "/v1/completions" else serving.chat
        # No client to watch for a disconnect: cancelling the line's task aborts it instead.
        out = await handler(req, None, RequestContext(span=span))
    except APIError as err:
        if err.status in (429, 503):
            raise Retry(err.status) from None
        return err.status, request_id, error_body(endpoint, err.status, err.message, err.param)
    except UserError as err:
        return 400, request_id, error_body(endpoint, 400, str(err))
    return 200, out.get("id", request_id), out
