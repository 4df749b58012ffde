"""`trtserve run` settings, from flags or a YAML file (configs/run-*.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trtserve.engine.config_file import describe_validation_error, read_yaml
from trtserve.engine.errors import UserError
from trtserve.engine.run_config import RuntimeConfig
from trtserve.vision.limits import ImageLimits

ReceiptsMode = Literal["off", "on", "hashes"]
SECTIONS = ("engine", "image_limits")  # nested settings whose flags merge over the YAML's keys
MAX_CLIENT_ID = 1024  # characters of a client-chosen request id (X-Request-Id, KServe `id`); only echoed


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"  # the HTTP (and gRPC) listen address; 0.0.0.0 for every interface
    port: int = Field(8000, ge=0, le=65535)  # the HTTP port (0: any free port)
    grpc_port: int | None = Field(None, ge=0, le=65535)  # Triton's gRPC protocol beside HTTP; off when unset
    model_name: str | None = None  # the name clients use; default: the engine dir's name
    api_key: str | None = None  # Bearer key required on everything but health (or TRTSERVE_API_KEY)
    # REPO_DIR's models: "none" loads each policy's versions at start; "explicit" only what is asked for
    model_control_mode: Literal["none", "explicit"] = "none"
    # Bearer key of the admin routes (receipts, cache invalidation, repository /admin/... and load/unload);
    # unset: those answer only clients on localhost
    admin_key: str | None = None
    # Store a receipt of every generation: "on" (prompt token ids too), "hashes" (only their sha256), "off".
    receipts: ReceiptsMode = "off"
    max_queued_requests: int = Field(256, ge=1)  # waiting (not yet generating) requests before 429
    max_queued_tokens: int = Field(1 << 20, ge=1)  # prompt tokens of waiting requests before 429
    request_timeout: float | None = Field(600.0, gt=0)  # seconds; a request's `timeout` may lower it
    max_body_bytes: int = Field(8 << 20, ge=1024)  # larger request bodies get 413
    cors_allow_origins: list[str] = []  # CORS is off unless origins are listed
    drain_timeout: float = Field(30.0, ge=0)  # seconds in-flight requests get after SIGTERM
    warmup: bool = True  # run one request before reporting ready
    # serve/watchdog.py: readiness turns false when an engine loop made no progress for this many s
    # while work waited; when an engine dies, the process exits with status 3 after dead_exit_after s.
    stall_timeout: float = Field(60.0, gt=0)
    dead_exit_after: float = Field(2.0, ge=0)
    # Durable state (batches, Idempotency-Key): a dir, "none" (off), or unset: ~/.local/share/trtserve/<model name>
    state_dir: str | None = None
    idempotency_ttl: float = Field(86400.0, gt=0)  # seconds an Idempotency-Key's stored response is kept
    batch_max_in_flight: int = Field(4, ge=1)  # batch lines generating at once (they also run at the lowest priority)
    max_file_bytes: int = Field(100 << 20, ge=1024)  # largest upload to POST /v1/files
    # OpenTelemetry traces to this OTLP endpoint (needs trtserve[otel]; docs/observability.md); unset: off, unless
    # OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set. OTLP over gRPC unless OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf.
    otlp_traces_endpoint: str | None = None
    # The access log's line per request (docs/observability.md): "json", or "text" (the same fields in one readable line)
    access_log_format: Literal["json", "text"] = "json"
    # Reasoning and tool-call parsers (docs/reasoning-and-tools.md); null: the ones the chat template implies
    reasoning_parser: str | None = None  # think | harmony | none (and vLLM's aliases: qwen3, deepseek_r1, gpt_oss)
    tool_call_parser: str | None = (
        None  # hermes | qwen3_coder | llama3_json | pythonic | mistral | harmony | deepseek_v3
    )
    # hosts whose http(s) image URLs may be fetched (docs/vision.md); empty: images come as data: URLs only
    allowed_media_domains: list[str] = []
    image_limits: ImageLimits = ImageLimits()  # images, bytes and pixels one request may send (docs/vision.md)
    default_chat_template_kwargs: dict = {}  # template variables of every chat request, e.g. {enable_thinking: false}
    engine: RuntimeConfig = RuntimeConfig()  # the engine section: KV-cache budget, limits, engine options

    @field_validator("reasoning_parser", "tool_call_parser")
    @classmethod
    def _known_parser(cls, v, info):
        from trtserve.text.reasoning import REASONING_PARSERS
        from trtserve.text.tool_parsers import TOOL_PARSERS

        known = REASONING_PARSERS if info.field_name == "reasoning_parser" else TOOL_PARSERS
        if v is not None and v not in known:
            raise ValueError(f"unknown {info.field_name} {v!r}; choose one of {', '.join(sorted(known))}")
        return v

    @field_validator("receipts", mode="before")
    @classmethod
    def _receipts_bool(cls, v):
        """YAML reads `receipts: on` / `true` as a bool."""
        return {True: "on", False: "off"}.get(v, v) if isinstance(v, bool) else v


def load_serve_config(path: Path | None, overrides: dict) -> ServeConfig:
    """The YAML file (if any) with flags on top; `engine` and `image_limits` overrides merge into those sections."""
    data = read_yaml(path) if path is not None else {}
    for key, value in overrides.items():
        if value is None:
            continue
        if key in SECTIONS and isinstance(data.get(key), dict):
            value = {**data[key], **value}
        data[key] = value
    try:
        return ServeConfig.model_validate(data)
    except ValidationError as err:
        raise UserError(describe_validation_error(err, "run config", ServeConfig)) from None
