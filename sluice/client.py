"""Python client for a Sluice gateway.

    from sluice.client import Client
    with Client("http://127.0.0.1:8000") as c:
        job = c.submit("minilm", "hello world")
        print(c.result(job["id"], timeout_s=30)["result"])
        vectors = c.map("minilm", texts, concurrency=16)

Submissions answered 429 or 503 are retried after the gateway's Retry-After,
so ``map`` rides out admission control instead of failing. The API key, when the
gateway wants one, is ``api_key=`` or the ``SLUICE_API_KEY`` environment variable.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from sluice.backoff import Backoff

TERMINAL = frozenset({"succeeded", "failed", "expired", "cancelled"})
BULK_ENDED = frozenset({"completed", "cancelled", "failed"})
RETRYABLE = frozenset({429, 503})
API_KEY_ENV = "SLUICE_API_KEY"


def auth_headers(api_key: str | None = None) -> dict[str, str]:
    """``Authorization: Bearer <key>`` for ``api_key`` or $SLUICE_API_KEY; {} for neither."""
    key = api_key or os.environ.get(API_KEY_ENV)
    return {"Authorization": f"Bearer {key}"} if key else {}


class SluiceClientError(Exception):
    """The gateway refused a request; ``status`` and ``type`` say why."""

    def __init__(self, status: int, err_type: str, message: str) -> None:
        super().__init__(f"{status} {err_type}: {message}")
        self.status = status
        self.type = err_type
        self.message = message


class JobFailed(SluiceClientError):
    """A job ended without a result (failed, expired or cancelled)."""

    def __init__(self, job: dict[str, Any]) -> None:
        err = job.get("error") or {}
        super().__init__(200, err.get("type", job["status"]), err.get("message", job["status"]))
        self.job = job


def _error(resp: httpx.Response) -> SluiceClientError:
    try:
        err = resp.json()["error"]
        return SluiceClientError(resp.status_code, err["type"], err["message"])
    except (ValueError, KeyError, TypeError):
        return SluiceClientError(resp.status_code, "http_error", resp.text[:200])


def _retry_after(resp: httpx.Response, backoff: Backoff) -> float:
    """The gateway's Retry-After plus up to a quarter more (a minimum, spread so that
    clients turned away together do not all come back together), else our backoff."""
    try:
        after = min(30.0, max(0.05, float(resp.headers.get("Retry-After", ""))))
    except ValueError:
        return backoff.next_s()
    return after * (1 + 0.25 * random.random())


class Client:
    """A synchronous client; thread-safe, so ``map`` shares one connection pool."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 70.0,
        max_retries: int = 20,
        transport: httpx.BaseTransport | None = None,
        api_key: str | None = None,
    ) -> None:
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
        self.http = httpx.Client(
            base_url=base_url.rstrip("/"),
            timeout=timeout_s,
            limits=limits,
            transport=transport,
            headers=auth_headers(api_key),
        )
        self.max_retries = max_retries

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        # A dropped connection (a gateway restarting in a rollout) is retried only
        # where a replay is harmless: reads, and submits carrying an idempotency key.
        headers = kw.get("headers") or {}
        replay_safe = method in ("GET", "DELETE") or "Idempotency-Key" in headers
        # Jittered (sluice.backoff): the clients of a restarted gateway spread out.
        backoff = Backoff(base_s=0.1, cap_s=5.0)
        for attempt in range(self.max_retries + 1):
            try:
                resp = self.http.request(method, url, **kw)
            except httpx.TransportError:
                if not replay_safe or attempt == self.max_retries:
                    raise
                time.sleep(backoff.next_s())
                continue
            if resp.status_code not in RETRYABLE or attempt == self.max_retries:
                break
            time.sleep(_retry_after(resp, backoff))
        if resp.status_code >= 400:
            raise _error(resp)
        return resp

    def submit(
        self,
        model: str,
        input: Any,
        *,
        priority: str | None = None,
        deadline_ms: int | None = None,
        metadata: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Queue one job; returns the gateway's job description (``id``, ``bucket``, ...)."""
        body: dict[str, Any] = {"input": input}
        for name, value in (
            ("priority", priority),
            ("deadline_ms", deadline_ms),
            ("metadata", metadata),
        ):
            if value is not None:
                body[name] = value
        # Every submit carries a key, so a retry after a dropped connection can
        # never queue the same job twice.
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        return self._request("POST", f"/v1/models/{model}/jobs", json=body, headers=headers).json()

    def submit_many(
        self, model: str, inputs: Sequence[Any], **options: Any
    ) -> list[dict[str, Any]]:
        body = {"inputs": list(inputs), **{k: v for k, v in options.items() if v is not None}}
        return self._request("POST", f"/v1/models/{model}/jobs/batch", json=body).json()["jobs"]

    def get(self, job_id: str, *, wait_s: float | None = None) -> dict[str, Any]:
        params = {"wait": wait_s} if wait_s else None
        return self._request("GET", f"/v1/jobs/{job_id}", params=params).json()

    def result(self, job_id: str, *, timeout_s: float = 300.0) -> dict[str, Any]:
        """Long-poll until the job ends; the finished job, or JobFailed / TimeoutError."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            job = self.get(job_id, wait_s=max(0.1, min(30.0, left)))
            if job["status"] == "succeeded":
                return job
            if job["status"] in TERMINAL:
                raise JobFailed(job)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} still {job['status']} after {timeout_s}s")

    def predict(self, model: str, input: Any, **options: Any) -> dict[str, Any]:
        """Submit and wait: the finished job (long-polling past the gateway's own wait)."""
        resp = self._request(
            "POST", f"/v1/models/{model}/predict", json={"input": input, **options}
        )
        job = resp.json()
        if job["status"] == "succeeded":
            return job
        if job["status"] in TERMINAL:
            raise JobFailed(job)
        return self.result(job["id"])

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._request("DELETE", f"/v1/jobs/{job_id}").json()

    def models(self) -> dict[str, Any]:
        """``GET /v1/models``: OpenAI's list shape, one entry per model under ``data``."""
        return self._request("GET", "/v1/models").json()

    # -- bulk jobs --------------------------------------------------------------
    def bulk_submit(self, model: str, jsonl: bytes) -> dict[str, Any]:
        """Upload a JSONL file (one ``{"input": ..., "custom_id": ...}`` a line)."""
        headers = {"Content-Type": "application/x-ndjson"}
        return self._request(
            "POST", f"/v1/models/{model}/bulk", content=jsonl, headers=headers
        ).json()

    def bulk_get(self, bulk_id: str) -> dict[str, Any]:
        return self._request("GET", f"/v1/bulk/{bulk_id}").json()

    def bulk_cancel(self, bulk_id: str) -> dict[str, Any]:
        return self._request("DELETE", f"/v1/bulk/{bulk_id}").json()

    def bulk_output(self, bulk_id: str) -> Iterator[dict[str, Any]]:
        """The output lines, in input order, once the bulk job has ended."""
        with self.http.stream("GET", f"/v1/bulk/{bulk_id}/output") as resp:
            if resp.status_code >= 400:
                resp.read()
                raise _error(resp)
            for line in resp.iter_lines():
                if line:
                    yield json.loads(line)

    def bulk_wait(
        self,
        bulk_id: str,
        *,
        timeout_s: float = 3600.0,
        poll_s: float = 1.0,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Poll until the bulk job ends; its final state (TimeoutError past timeout_s)."""
        deadline = time.monotonic() + timeout_s
        while True:
            view = self.bulk_get(bulk_id)
            if on_progress is not None:
                on_progress(view)
            if view["state"] in BULK_ENDED:
                return view
            if time.monotonic() >= deadline:
                raise TimeoutError(f"bulk job {bulk_id} still {view['state']} after {timeout_s}s")
            time.sleep(poll_s)

    def map(
        self,
        model: str,
        inputs: Iterable[Any],
        *,
        concurrency: int = 16,
        progress: bool = False,
        timeout_s: float = 600.0,
        **options: Any,
    ) -> list[Any]:
        """Run every input through the model; results in input order.

        At most ``concurrency`` jobs are outstanding at once; a failed job raises
        JobFailed after the others finish (their results are not lost to the error).
        """
        items = list(inputs)

        def one(value: Any) -> Any:
            job = self.submit(model, value, **options)
            return self.result(job["id"], timeout_s=timeout_s)["result"]

        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            futures = [pool.submit(one, v) for v in items]
            if progress:
                _progress(futures, f"{model}")
            return [f.result() for f in futures]


def _progress(futures: list[Any], label: str) -> None:
    from concurrent.futures import as_completed

    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(label, total=len(futures))
        for _ in as_completed(futures):
            bar.advance(task)
