"""Redis with a password (requirepass) and over TLS (rediss://, certificate verified)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from gateway.app import create_app
from sluice.errors import RedisUnavailable
from sluice.jobs import NewJob, Outcome
from sluice.local.redis_server import RedisServer, start_redis
from sluice.queue import QueueClient
from sluice.queue.client import connect
from tests.conftest import EXAMPLE_CONFIG, make_config
from tests.kit.tls_proxy import TlsProxy

PASSWORD = "pw-Redis-4f1c:@/x"  # URL-special characters on purpose


@pytest.fixture(scope="module")
def locked() -> Iterator[RedisServer]:
    server = start_redis(password=PASSWORD)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tls(locked: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsProxy]:
    proxy = TlsProxy(locked.host, locked.port, tmp_path_factory.mktemp("tls")).start()
    yield proxy
    proxy.stop()


def tls_url(proxy: TlsProxy, ca_file: Path) -> str:
    return (
        f"rediss://:{quote(PASSWORD, safe='')}@127.0.0.1:{proxy.port}/0"
        f"?ssl_ca_certs={quote(str(ca_file))}"
    )


def _round_trip(url: str) -> None:
    q = QueueClient(connect(url, timeout_s=3), dict(make_config().models))
    try:
        [sub] = q.submit("m", [NewJob("hi", "32", 1)])
        batch = q.claim("m", "w")
        assert [j.id for j in batch.jobs] == [sub.id]
        q.complete("m", [Outcome.ok(sub.id, [1.0])], "w")
        assert q.get(sub.id).result == [1.0]
    finally:
        q.redis.flushall()
        q.redis.close()


def test_password_url_works_and_no_password_is_refused(locked: RedisServer) -> None:
    assert f":{quote(PASSWORD, safe='')}@" in locked.url
    _round_trip(locked.url)
    q = QueueClient(
        connect(f"redis://{locked.host}:{locked.port}/0", 2), dict(make_config().models)
    )
    with pytest.raises(Exception) as e:  # noqa: PT011 -- redis-py's auth error type varies
        q.stats("m")
    assert "auth" in str(e.value).lower() or isinstance(e.value, RedisUnavailable)


def test_password_never_on_the_redis_server_command_line(locked: RedisServer) -> None:
    assert locked.proc is not None
    cmdline = Path(f"/proc/{locked.proc.pid}/cmdline").read_bytes().decode()
    assert PASSWORD not in cmdline


def test_tls_with_certificate_verification(tls: TlsProxy) -> None:
    _round_trip(tls_url(tls, tls.ca_file))


def test_tls_refuses_a_server_the_ca_did_not_sign(tls: TlsProxy, tmp_path: Path) -> None:
    import trustme

    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    q = QueueClient(connect(tls_url(tls, other), timeout_s=2), dict(make_config().models))
    with pytest.raises(RedisUnavailable) as e:
        q.stats("m")
    assert "certificate" in str(e.value).lower()


@pytest.mark.asyncio(loop_scope="function")
async def test_gateway_over_tls_with_password(tls: TlsProxy) -> None:
    cfg = make_config(autoscaling={"min_replicas": 0})  # no worker needed to queue
    app = create_app(cfg, tls_url(tls, tls.ca_file))
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
            assert (await c.get("/readyz")).status_code in (200, 503)
            r = await c.post("/v1/models/m/jobs", json={"input": "over tls"})
            assert r.status_code == 202, r.text
            job = await c.get(f"/v1/jobs/{r.json()['id']}")
            assert job.json()["status"] == "queued"
    q = QueueClient(connect(tls_url(tls, tls.ca_file), timeout_s=3), dict(cfg.models))
    try:  # the job really is in the Redis behind the proxy
        assert q.get(r.json()["id"]).input == "over tls"
    finally:
        q.redis.flushall()
        q.redis.close()


def _sluice(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice", *args], capture_output=True, text=True, timeout=60
    )


def test_status_cli_over_tls_and_its_errors_hide_the_password(tls: TlsProxy) -> None:
    ok = _sluice(
        "status", "--config", str(EXAMPLE_CONFIG), "--redis-url", tls_url(tls, tls.ca_file)
    )
    assert ok.returncode == 0, ok.stderr
    bad = _sluice(
        "status",
        "--config",
        str(EXAMPLE_CONFIG),
        "--redis-url",
        f"redis://:{quote(PASSWORD, safe='')}@127.0.0.1:1/0",
    )
    assert bad.returncode == 3
    assert "***" in bad.stderr
    for secret in (PASSWORD, quote(PASSWORD, safe="")):
        assert secret not in bad.stderr + bad.stdout
