"""Request and response bodies of the REST API (they are the OpenAPI schema)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Priority = Literal["high", "normal", "low"]
Status = Literal["queued", "running", "succeeded", "failed", "expired", "cancelled"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


WebhookEvent = Literal["succeeded", "failed", "expired", "cancelled"]


class WebhookSpec(_Body):
    url: str = Field(
        ...,
        max_length=2048,
        description="https URL to POST the job to when it ends (Standard Webhooks signed).",
    )
    events: list[WebhookEvent] | None = Field(
        None, min_length=1, description="Which endings to report (default: all four)."
    )


class JobRequest(_Body):
    input: Any = Field(..., description="The model's input: text, or {'text': ...}, or a list.")
    priority: Priority = "normal"
    # strict: "5000" or 5000.0 is a client bug to report, not to coerce.
    deadline_ms: int | None = Field(
        None, gt=0, strict=True, description="Expire if not started by then."
    )
    metadata: dict[str, Any] | None = None
    webhook: WebhookSpec | None = Field(None, description="Call this URL when the job ends.")


class BatchRequest(_Body):
    inputs: list[Any] = Field(..., min_length=1)
    priority: Priority = "normal"
    deadline_ms: int | None = Field(None, gt=0, strict=True)
    metadata: dict[str, Any] | None = None
    webhook: WebhookSpec | None = Field(None, description="Each job calls it when it ends.")


class JobAccepted(BaseModel):
    id: str
    status: Status
    model: str
    bucket: str
    cost: int
    priority: Priority
    truncated: bool = False


class BatchAccepted(BaseModel):
    jobs: list[JobAccepted]


class ErrorDetail(BaseModel):
    type: str
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


class Timings(BaseModel):
    queued_at: float
    started_at: float | None
    finished_at: float | None
    queue_wait_ms: float | None
    run_ms: float | None
    ttft_ms: int | None = Field(
        None, description="Generative jobs: enqueue to the first output token (absent before it)."
    )


class WebhookState(BaseModel):
    url: str
    events: list[str]
    state: Literal["waiting", "not_sent", "pending", "delivered", "dead"]
    attempts: int = 0
    last_status: int | None = None
    last_error: str | None = None
    last_attempt_at: float | None = None
    next_attempt_at: float | None = None


class JobView(BaseModel):
    id: str
    model: str
    status: Status
    bucket: str
    cost: int
    # "bulk": an item a bulk job fed (its own class below low; it cannot be submitted).
    priority: Literal["high", "normal", "low", "bulk"]
    result: Any = None
    error: ErrorDetail | None = None
    attempts: int
    metadata: dict[str, Any] | None = None
    timings: Timings
    webhook: WebhookState | None = Field(None, description="Only for a job with a webhook.")


BulkStateName = Literal["queued", "running", "cancelling", "completed", "cancelled", "failed"]


class BulkCounts(BaseModel):
    total: int = Field(description="Lines in the file.")
    done: int = Field(description="Lines with an output line (succeeded + failed).")
    succeeded: int
    failed: int
    remaining: int
    fed: int = Field(description="Lines handed to the model's queues so far.")


class BulkView(BaseModel):
    id: str
    model: str
    state: BulkStateName
    counts: BulkCounts
    rate_per_s: float | None = Field(description="Lines done per second, last 30 s.")
    eta_s: float | None = Field(description="Seconds to go at that rate.")
    created_at: float
    started_at: float | None
    finished_at: float | None
    error: ErrorDetail | None = None
    output: str = Field(description="Where the output file is, once the bulk job ends.")
    webhook: WebhookState | None = Field(None, description="Only for a bulk job with a webhook.")


class Redelivery(BaseModel):
    id: str
    state: Literal["pending"]
    previous_state: str


class BulkCancelResult(BaseModel):
    id: str
    state: Literal["cancelled", "cancelling"]
    previous_state: BulkStateName


class CancelResult(BaseModel):
    id: str
    status: Literal["cancelled"]
    previous_status: Status


class BucketInfo(BaseModel):
    bucket: str
    bound: int
    queued: int
    queued_cost: int


class PauseInfo(BaseModel):
    """A paused model's pause (docs/adr/0154)."""

    paused: bool
    at_ms: int = Field(description="Epoch ms: when it was paused.")
    by: str = Field(description="The admin key's name that paused it ('' on an open gateway).")
    refuse_submits: bool = Field(description="Whether new jobs are refused (503) meanwhile.")


class ModelInfo(BaseModel):
    """OpenAI's model object (``id``, ``object``, ``created``, ``owned_by``), then Sluice's."""

    id: str = Field(description="The model's name in the config.")
    object: Literal["model"] = "model"
    created: int = Field(description="Unix seconds: when this gateway process loaded its config.")
    owned_by: Literal["sluice"] = "sluice"
    name: str = Field(description="The same as id.")
    handler: str
    buckets: list[BucketInfo]
    queued: int
    queued_cost: int
    in_flight: int
    workers: dict[str, int]
    scales_from_zero: bool
    paused: bool = Field(False, description="An operator paused it: no worker claims.")
    pause: PauseInfo | None = Field(None, description="While paused: since when, by whom.")


class ModelList(BaseModel):
    """OpenAI's list shape, so ``client.models.list()`` of OpenAI's SDKs reads it."""

    object: Literal["list"] = "list"
    data: list[ModelInfo]


class EmbeddingsRequest(_Body):
    """OpenAI's embeddings request; ``priority`` and ``deadline_ms`` are Sluice's own
    (an OpenAI client sends them in ``extra_body``)."""

    model: str = Field(..., max_length=64, description="A model named in the config.")
    # Checked in the route, which says what is wrong (token arrays, empty strings).
    input: Any = Field(..., description="A string, or a list of strings.")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, description="Refused: models return their own size.")
    user: str | None = Field(None, max_length=256, description="Accepted and not used.")
    priority: Priority = "normal"
    deadline_ms: int | None = Field(None, gt=0, strict=True)


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(
        ..., description="floats, or base64 of little-endian float32 (encoding_format)"
    )


class EmbeddingsUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingsUsage


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIErrorBody(BaseModel):
    error: OpenAIErrorDetail


def openai_errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the OpenAI-shaped error statuses."""
    return {c: {"model": OpenAIErrorBody} for c in codes}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for error statuses, all with the error body."""
    return {c: {"model": ErrorBody} for c in codes}
