"""One webhook attempt: sign, connect through the SSRF guard, POST, classify.

Signing is the Standard Webhooks scheme (the ``standardwebhooks`` package):
``webhook-id`` (the same for every attempt of a delivery), ``webhook-timestamp``
and ``webhook-signature: v1,<base64 HMAC-SHA256 of id.timestamp.body>``.

The connection goes through :class:`GuardedBackend`, an httpcore network backend
that resolves the host itself, refuses any address the guard refuses, and connects
to the address it checked: the check and the connection use one DNS answer (no
rebinding window), and TLS still verifies the URL's host name. Redirects are never
followed; response bodies are read up to a cap.
"""

from __future__ import annotations

import asyncio
import base64
import random
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpcore
import httpx
from standardwebhooks.webhooks import Webhook

from sluice.config import WebhooksConfig
from sluice.errors import ConfigError, WebhookHostUnresolved, WebhookRefused
from sluice.webhooks.guard import Guard, Target, parse_url
from sluice.webhooks.ops import Claimed

USER_AGENT = "sluice-webhooks/1"


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to addresses the guard allows, the ones it checked."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        target = Target("", "", host.lower().strip("[]").rstrip("."), port)
        addresses = await self.guard.resolve(target)  # every one checked
        last: Exception | None = None
        for ip in addresses:  # in the resolver's order, the next one if one refuses
            try:
                return await self.inner.connect_tcp(
                    str(ip), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as e:
                last = e
        assert last is not None
        raise last

    async def connect_unix_socket(self, *args: Any, **kw: Any) -> httpcore.AsyncNetworkStream:
        raise WebhookRefused("webhooks never connect to unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class _GuardedTransport(httpx.AsyncHTTPTransport):
    def __init__(self, guard: Guard, limits: httpx.Limits, verify: ssl.SSLContext | bool) -> None:
        super().__init__(verify=verify, limits=limits, trust_env=False, retries=0)
        # httpx builds its pool without a way to pass a network backend: build the same
        # pool again with ours (tests/redis/webhooks/test_delivery.py: refused addresses never
        # get a connection, which fails if httpx stops using this pool).
        ssl_context = self._pool._ssl_context
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=False,
            retries=0,
            network_backend=GuardedBackend(guard),
        )


@dataclass(frozen=True, slots=True)
class Attempt:
    """What one attempt gave and what follows: 'delivered', 'retry' or 'dead'."""

    next: str
    status: int  # HTTP status; 0 when there was none
    error: str  # '' when delivered
    latency_ms: float
    retry_ms: int = 0
    client_error: bool = False
    result: str = ""  # for metrics: 2xx, 4xx, 5xx, 410, 429, timeout, connect, tls, refused

    @property
    def delivered(self) -> bool:
        return self.next == "delivered"


MIN_SECRET_BYTES = 16


def signer(secret: str) -> Webhook:
    """A Standard Webhooks signer; ValueError for a secret that is not one: ``whsec_``
    (optional) and the base64 of at least 16 bytes (the value is never in the message)."""
    why = f"not a Standard Webhooks secret (whsec_ and the base64 of {MIN_SECRET_BYTES}+ bytes)"
    try:
        raw = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except (ValueError, TypeError):
        raise ValueError(why) from None
    if len(raw) < MIN_SECRET_BYTES:
        raise ValueError(why)
    return Webhook(raw)


def sign_headers(wh: Webhook, msg_id: str, body: str, now: float) -> dict[str, str]:
    ts = datetime.fromtimestamp(int(now), tz=UTC)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now)),
        "webhook-signature": wh.sign(msg_id, ts, body),
        "content-type": "application/json",
        "user-agent": USER_AGENT,
    }


class Sender:
    """Sends attempts (the notifier's claim bounds them per host); one per notifier."""

    def __init__(self, cfg: WebhooksConfig, guard: Guard) -> None:
        self.cfg = cfg
        self.guard = guard
        limits = httpx.Limits(
            max_connections=cfg.max_concurrency,
            max_keepalive_connections=cfg.max_concurrency,
            keepalive_expiry=30.0,
        )
        verify: ssl.SSLContext | bool = True
        if cfg.ca_file:
            try:
                verify = ssl.create_default_context(cafile=cfg.ca_file)
            except (OSError, ssl.SSLError) as e:
                why = f"webhooks.ca_file {cfg.ca_file}: cannot load: {e.strerror or e}"
                raise ConfigError(why) from e
        self.client = httpx.AsyncClient(
            transport=_GuardedTransport(guard, limits, verify),
            timeout=httpx.Timeout(cfg.timeout_s, connect=cfg.connect_timeout_s),
            follow_redirects=False,
            trust_env=False,
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    async def attempt(self, c: Claimed, body: str, wh: Webhook, budget_s: float) -> Attempt:
        """One attempt, all of it (connecting, sending, reading the answer) within
        ``budget_s``: what is left of the lease, so a slow receiver is never sent the
        same delivery again by another notifier while this attempt still runs. It
        never waits for a per-host slot: the notifier's claim keeps
        ``per_host_connections`` by leasing no delivery for a host that has none free."""
        started = time.monotonic()
        status, error, result = 0, "", ""
        retry_after: float | None = None
        try:
            async with asyncio.timeout(max(budget_s, 0.001)):
                parse_url(c.url, self.cfg.allow_http)  # the config may have changed
                headers = sign_headers(wh, c.webhook_id, body, time.time())
                async with self.client.stream(
                    "POST", c.url, content=body.encode(), headers=headers
                ) as resp:
                    status = resp.status_code
                    retry_after = _retry_after(resp.headers.get("retry-after"))
                    await self._drain(resp)
        except WebhookHostUnresolved as e:  # a resolver outage is not the receiver's fault
            error, result = str(e), "connect"
        except WebhookRefused as e:
            error, result = str(e), "refused"
        except (httpx.TimeoutException, TimeoutError):
            if status:  # the answer came; only its body was slow: the status stands
                error, result = "", ""
            else:
                error, result = "timed out", "timeout"
        except (httpx.HTTPError, OSError) as e:
            tls = _tls_error(e)
            if tls is not None:  # the receiver's certificate: its fault, like a 4xx
                error, result = f"TLS: {tls}", "tls"
            else:
                error, result = f"connection failed: {type(e).__name__}", "connect"
        except Exception as e:  # noqa: BLE001 - e.g. a host name httpx cannot encode
            # Recorded and counted like a client error, never an unrecorded loop.
            error, result = f"cannot send: {type(e).__name__}: {str(e)[:120]}", "refused"
        latency = (time.monotonic() - started) * 1000
        return self._classify(c, status, error, result, latency, retry_after)

    async def _drain(self, resp: httpx.Response) -> None:
        """Read the response body up to the cap (a receiver's page is not our business)."""
        left = self.cfg.max_response_bytes
        async for chunk in resp.aiter_raw():
            left -= len(chunk)
            if left <= 0:
                break

    def _classify(
        self,
        c: Claimed,
        status: int,
        error: str,
        result: str,
        latency: float,
        retry_after: float | None,
    ) -> Attempt:
        if 200 <= status < 300:
            return Attempt("delivered", status, "", latency, result="2xx")
        if status == 410:
            why = "the receiver answered 410 Gone: no more attempts"
            return Attempt("dead", status, why, latency, result="410")
        if status:
            error = f"HTTP {status}"
            result = "429" if status == 429 else f"{status // 100}xx"
        client_error = result in ("refused", "tls") or (status and status != 429 and status < 500)
        if client_error and c.client_errors + 1 >= self.cfg.max_client_error_attempts:
            why = f"{error}; {c.client_errors + 1} such attempts, no more"
            return Attempt("dead", status, why, latency, client_error=True, result=result)
        delay = self.delay_s(c.fails, retry_after)
        if time.time() + delay > c.first_ms / 1000 + self.cfg.horizon_s:
            why = f"{error}; retries exhausted (webhooks.horizon_s)"
            return Attempt(
                "dead", status, why, latency, client_error=bool(client_error), result=result
            )
        return Attempt(
            "retry", status, error, latency, int(delay * 1000), bool(client_error), result
        )

    def delay_s(self, fails: int, retry_after: float | None = None) -> float:
        """The wait after the (fails+1)-th failed attempt: the schedule's step, with
        jitter, never less than the receiver's Retry-After (up to an hour)."""
        sched = self.cfg.retry_schedule_s
        base = sched[min(fails, len(sched) - 1)]
        j = self.cfg.jitter
        delay = base * random.uniform(1 - j, 1 + j)
        if retry_after is not None:
            delay = max(delay, min(retry_after, 3600.0))
        return delay


def _tls_error(e: BaseException) -> str | None:
    """The TLS failure behind a connection error (certificate, handshake), if any."""
    seen: BaseException | None = e
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLError):
            return str(getattr(seen, "verify_message", "") or seen.reason or seen)[:200]
        seen = seen.__cause__ or seen.__context__
    return None


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
