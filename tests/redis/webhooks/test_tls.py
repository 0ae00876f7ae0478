"""https webhooks through the guarded connection: the guard checks the address, TLS
still verifies the certificate against the URL's host name (a private CA here)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trustme

from notifier.loop import build
from sluice.errors import ConfigError
from sluice.jobs import NewJob, Outcome, Webhook
from sluice.queue import QueueClient
from sluice.queue.client import connect
from tests.kit.receiver import receiving
from tests.kit.webhooks import SECRET, SECRET_ENV, hook_config, notifier
from tests.waits import wait_until


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def server_context(ca: trustme.CA, name: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(name).configure_cert(ctx)
    return ctx


def deliver(redis_url: str, ca_file: Path, ctx: ssl.SSLContext, want: str) -> list[object]:
    # localhost may resolve to ::1 first: both are opened, the receiver is on 127.0.0.1
    cfg = hook_config(
        ca_file=str(ca_file), allow_networks=["127.0.0.1/32", "::1/128"], allow_http=False,
        max_client_error_attempts=1, retry_schedule_s=[0.1],
    )  # fmt: skip
    q = QueueClient(connect(redis_url), dict(cfg.models))
    try:
        with receiving(tls=ctx) as rx:
            assert rx.url.startswith("https://localhost:")
            job_id = q.submit("m", [NewJob("hi", "32", 1, webhook=Webhook(rx.url))])[0].id
            batch = q.claim("m", "w1")
            q.complete("m", [Outcome.ok(batch.jobs[0].id, [1.0])], "w1")
            with notifier(cfg, redis_url):
                wait_until(lambda: (q.get(job_id).webhook or {}).get("state") == want, what=want)
            return list(rx.calls)
    finally:
        q.redis.close()


def test_a_certificate_for_the_urls_host_is_accepted(
    ca: trustme.CA, tmp_path: Path, redis_url: str
) -> None:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    calls = deliver(redis_url, ca_file, server_context(ca, "localhost"), "delivered")
    assert len(calls) == 1


def test_a_certificate_for_another_host_is_refused(
    ca: trustme.CA, tmp_path: Path, redis_url: str
) -> None:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    calls = deliver(redis_url, ca_file, server_context(ca, "other.example"), "dead")
    assert calls == []  # the handshake failed: no request was sent


def test_an_unknown_ca_is_refused(ca: trustme.CA, tmp_path: Path, redis_url: str) -> None:
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    assert deliver(redis_url, other, server_context(ca, "localhost"), "dead") == []


def test_a_ca_file_that_cannot_be_read_stops_the_notifier(tmp_path: Path, redis_url: str) -> None:
    cfg = hook_config(ca_file=str(tmp_path / "missing.pem"))
    with pytest.raises(ConfigError, match="webhooks.ca_file"):
        build(cfg, redis_url, {SECRET_ENV: SECRET})
