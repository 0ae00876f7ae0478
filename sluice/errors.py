"""Sluice's error hierarchy; the gateway maps these to HTTP in one place."""

from __future__ import annotations


class SluiceError(Exception):
    """Base of every error Sluice raises on purpose."""

    type = "internal"
    # Seconds a client should wait before retrying (HTTP Retry-After), when known.
    retry_after_s: float | None = None


class ConfigError(SluiceError):
    type = "config_error"


class RedisUnavailable(SluiceError):
    type = "redis_unavailable"


class NotReplicated(RedisUnavailable):
    """queue.durability "replica": no replica confirmed a write in time (503: the
    write may be on the primary only; retrying with the Idempotency-Key is safe)."""

    type = "not_replicated"
    retry_after_s = 1.0


class BulkUnavailable(SluiceError):
    """Bulk jobs cannot run here: RQ has no plain Redis to use (503, a setting to fix)."""

    type = "bulk_unavailable"


class RedisBinaryNotFound(SluiceError):
    type = "redis_not_found"


class UnknownModel(SluiceError):
    type = "unknown_model"


class JobNotFound(SluiceError):
    type = "job_not_found"


class InvalidInput(SluiceError):
    type = "invalid_input"


class WebhookRefused(InvalidInput):
    """A webhook URL the SSRF guard or an allow-list refuses (422, with the reason)."""

    type = "webhook_refused"


class WebhookHostUnresolved(WebhookRefused):
    """The host's name did not resolve for a reason that passes (a resolver outage,
    EAI_AGAIN): at a delivery a network error, retried to the horizon; at submit a
    refusal like any other."""


class InputTooLarge(SluiceError):
    type = "input_too_large"


class QueueFull(SluiceError):
    """Admission refused: the model's queue is over its job count or cost limit."""

    type = "queue_full"

    def __init__(self, message: str, reason: str, queued: int, queued_cost: int) -> None:
        super().__init__(message)
        self.reason = reason
        self.queued = queued
        self.queued_cost = queued_cost


class ModelPaused(SluiceError):
    """Admission refused: an operator paused the model with ``refuse_submits``
    (HTTP 503: it is back when resumed; docs/adr/0154)."""

    type = "model_paused"
    retry_after_s = 30.0


class LeaseLost(SluiceError):
    """A fenced write refused: the caller no longer holds the lease it wrote under
    (a bulk coordinator that was paused past its lease, then woke)."""


class Unauthorized(SluiceError):
    """No API key, or one that is not configured (HTTP 401 with WWW-Authenticate)."""

    type = "unauthorized"


class Forbidden(SluiceError):
    """A valid API key without the right to this route (an admin route)."""

    type = "forbidden"


class PriorityNotAllowed(Forbidden):
    """A valid API key asking for a priority above its ``max_priority`` (HTTP 403)."""

    type = "priority_not_allowed"


class RateLimited(SluiceError):
    """Admission refused: the API key is over its rate limit (``retry_after_s`` set)."""

    type = "rate_limited"

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TooManyStreams(SluiceError):
    """This gateway already serves ``gateway.model_events_max_viewers`` model event
    streams (HTTP 429): retry later, or on another replica."""

    type = "too_many_streams"
    retry_after_s = 5.0


class IdempotencyKeyReused(SluiceError):
    """An Idempotency-Key replayed with another request body than the one that made
    its job (HTTP 422): the first job is not what this request asks for."""

    type = "idempotency_key_reused"

    def __init__(self, message: str, index: int = 0) -> None:
        super().__init__(message)
        self.index = index  # 0-based: the job of the submit whose key was reused


class JobConflict(SluiceError):
    """The job is in a state that does not allow the request (e.g. cancel a finished job)."""

    type = "conflict"

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message)
        self.status = status


class Overloaded(SluiceError):
    """Admission refused for load: e.g. the estimated wait exceeds the job's deadline."""

    type = "overloaded"

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class NotReady(SluiceError):
    """No worker can take the job and the model does not scale from zero."""

    type = "not_ready"


class ShuttingDown(NotReady):
    """This gateway process is stopping (SIGTERM): retry, on another replica or on
    this one once restarted. Long-polls get it at once instead of holding shutdown."""

    type = "shutting_down"
    retry_after_s = 0.5


class ModelUnavailable(NotReady):
    """This gateway cannot take the model's jobs (its prompt codec did not load):
    a server-side fault, reported by /readyz; retry later or on another replica."""

    type = "model_unavailable"
    retry_after_s = 5.0


class UnsupportedMediaType(SluiceError):
    type = "unsupported_media_type"


class ModelFailed(SluiceError):
    """A job the caller waited on failed in the model (not the caller's input)."""

    type = "model_failed"


class TimedOut(SluiceError):
    """A wait for jobs ended before they did (or a job expired before it ran)."""

    type = "timeout"
    retry_after_s = 1.0
