"""sluice.webhooks.guard and the sender's retry rules: pure logic, no network."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notifier.sender import Attempt, Sender, signer
from sluice.config import WebhooksConfig
from sluice.errors import WebhookRefused
from sluice.webhooks.guard import Guard, dns_failure_is_temporary, host_allowed, parse_url
from sluice.webhooks.ops import Claimed


def guard(resolved: dict[str, list[str]] | None = None, **cfg: object) -> Guard:
    async def resolver(host: str, port: int) -> list[str]:
        if resolved is None or host not in resolved:
            raise OSError("no such host")
        return resolved[host]

    return Guard(WebhooksConfig(**cfg), resolver)  # type: ignore[arg-type]


def admit(g: Guard, url: str, allow: list[str] | None = None) -> None:
    asyncio.run(g.admit(url, allow or []))


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("file:///etc/passwd", "is not https"),
        ("gopher://example.com/", "is not https"),
        ("http://example.com/hook", "must be https"),
        ("https://user:pw@example.com/", "credentials"),
        ("https:///nohost", "no host"),
        ("https://example.com/a b", "spaces"),
        ("https://[::1/", "not a URL"),
        ("https://example.com:99999/", "not a URL"),
        ("", "1-2048"),
    ],
)
def test_urls_of_the_wrong_form_are_refused(url: str, why: str) -> None:
    with pytest.raises(WebhookRefused, match=why):
        parse_url(url, allow_http=False)


@pytest.mark.parametrize(
    ("url", "resolved", "why"),
    [
        ("https://127.0.0.1/", {}, "loopback"),
        ("https://169.254.169.254/latest/meta-data", {}, "link-local"),
        ("https://[::1]:8443/", {}, "loopback"),
        ("https://[::ffff:127.0.0.1]/", {}, "loopback"),
        ("https://10.1.2.3/", {}, "private"),
        ("https://224.0.0.1/", {}, "multicast"),
        ("https://0.0.0.0/", {}, "unspecified"),
        ("https://[64:ff9b::a9fe:a9fe]/", {}, "link-local"),  # NAT64 of the metadata address
        ("https://[2002:7f00:1::]/", {}, "loopback"),  # 6to4 of 127.0.0.1
        ("https://[::127.0.0.1]/", {}, "loopback"),  # IPv4-compatible
        ("https://[::ffff:0:7f00:1]/", {}, "loopback"),  # SIIT
        ("https://[fec0::1]/", {}, "public"),  # site-local
        ("https://nat64.example/", {"nat64.example": ["64:ff9b::a00:1"]}, "private"),
        ("https://a..b/", {}, "does not resolve"),
        ("https://\u2603.net/", {}, "not a URL"),
        ("https://x.example:0/", {}, "port 0"),
        ("https://localhost/", {"localhost": ["127.0.0.1", "::1"]}, "loopback"),
        ("https://inside.example/", {"inside.example": ["192.168.1.9"]}, "private"),
        # one private address among public ones: the connection could use it
        ("https://mixed.example/", {"mixed.example": ["93.184.216.34", "10.0.0.7"]}, "private"),
        ("https://nowhere.example/", {}, "does not resolve"),
    ],
)
def test_addresses_that_are_not_public_are_refused(
    url: str, resolved: dict[str, list[str]], why: str
) -> None:
    with pytest.raises(WebhookRefused, match=why):
        admit(guard(resolved), url)


def test_public_hosts_pass_and_allow_networks_opens_named_ones() -> None:
    admit(guard({"api.example": ["93.184.216.34"]}), "https://api.example/hook")
    admit(guard(allow_networks=["127.0.0.1/32"]), "https://127.0.0.1:9/hook")
    with pytest.raises(WebhookRefused, match="loopback"):  # 127.0.0.2 is not opened
        admit(guard(allow_networks=["127.0.0.1/32"]), "https://127.0.0.2/hook")
    with pytest.raises(WebhookRefused, match="must be https"):
        admit(guard(allow_networks=["127.0.0.1/32"]), "http://127.0.0.1/hook")
    admit(guard(allow_networks=["127.0.0.1/32"], allow_http=True), "http://127.0.0.1/hook")


def test_the_allow_list_names_hosts_and_their_subdomains() -> None:
    assert host_allowed("anything.example", [])
    assert host_allowed("api.example.com", ["api.example.com"])
    assert host_allowed("a.b.example.com", ["*.example.com"])
    assert not host_allowed("example.com", ["*.example.com"])
    assert not host_allowed("evilexample.com", ["*.example.com"])
    assert not host_allowed("api.example.com.evil", ["api.example.com"])
    g = guard({"api.example.com": ["93.184.216.34"]})
    with pytest.raises(WebhookRefused, match="allow-list"):
        admit(g, "https://other.example.com/", ["api.example.com"])


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_an_ipv4_address_is_reachable_exactly_when_public_unicast(n: int) -> None:
    ip = ipaddress.IPv4Address(n)
    assert guard().reachable(ip) == (ip.is_global and not ip.is_multicast)
    assert not guard().reachable(ipaddress.IPv6Address(f"::ffff:{ip}")) or ip.is_global


def test_a_changed_dns_answer_is_checked_again_at_delivery() -> None:
    answers = {"rebind.example": ["93.184.216.34"]}

    async def resolver(host: str, port: int) -> list[str]:
        return answers[host]

    g = Guard(WebhooksConfig(), resolver)
    asyncio.run(g.admit("https://rebind.example/", []))
    answers["rebind.example"] = ["127.0.0.1"]
    target = parse_url("https://rebind.example/", False)
    asyncio.run(g.resolve(target, cached=True))  # a submit may reuse its recent answer
    with pytest.raises(WebhookRefused, match="loopback"):  # a delivery never does
        asyncio.run(g.resolve(target))


def claimed(fails: int = 0, client_errors: int = 0, first_ms: int | None = None) -> Claimed:
    import time

    first = int(time.time() * 1000) if first_ms is None else first_ms
    return Claimed("m", "m.1", "t", fails + 1, fails, client_errors, "https://x/", "succeeded",
                   "", "job", first, first, "")  # fmt: skip


@pytest.fixture
def classify():  # type: ignore[no-untyped-def]
    s = Sender.__new__(Sender)
    s.cfg = WebhooksConfig(retry_schedule_s=[5, 30, 120], jitter=0.2, max_client_error_attempts=3)
    return s


def test_what_follows_an_attempt(classify: Sender) -> None:
    c = claimed()
    assert classify._classify(c, 204, "", "", 1.0, None).next == "delivered"
    gone = classify._classify(c, 410, "", "", 1.0, None)
    assert gone.next == "dead" and "410" in gone.error
    for status in (429, 500, 503):
        a = classify._classify(c, status, "", "", 1.0, None)
        assert a.next == "retry" and not a.client_error and 4000 <= a.retry_ms <= 6000
    timeout = classify._classify(c, 0, "timed out", "timeout", 1.0, None)
    assert timeout.next == "retry" and not timeout.client_error
    four = classify._classify(c, 404, "", "", 1.0, None)
    assert four.next == "retry" and four.client_error
    assert classify._classify(claimed(2, 2), 404, "", "", 1.0, None).next == "dead"
    assert classify._classify(claimed(2, 2), 503, "", "", 1.0, None).next == "retry"
    redirect = classify._classify(c, 302, "", "", 1.0, None)
    assert redirect.next == "retry" and redirect.client_error and redirect.error == "HTTP 302"


def test_the_schedule_steps_with_jitter_and_honours_retry_after(classify: Sender) -> None:
    for fails, base in ((0, 5), (1, 30), (2, 120), (7, 120)):
        d = classify.delay_s(fails)
        assert base * 0.8 <= d <= base * 1.2
    assert classify.delay_s(0, retry_after=90) == 90
    assert classify.delay_s(0, retry_after=10**9) == 3600


def test_retries_stop_at_the_horizon(classify: Sender) -> None:
    import time

    old = int((time.time() - 86400 + 2) * 1000)  # the horizon ends in 2 s; the next step is 5 s
    a = classify._classify(claimed(first_ms=old), 500, "", "", 1.0, None)
    assert a.next == "dead" and "horizon" in a.error


def test_the_default_schedule_makes_nine_attempts_within_the_horizon() -> None:
    """docs/webhooks.md: 5 s, 30 s, 2 min, 10 min, 1 h, 3 h, 6 h, 12 h then the
    horizon (24 h): 9 attempts over about 22 hours (no jitter)."""
    import time

    s = Sender.__new__(Sender)
    s.cfg = WebhooksConfig(jitter=0)
    now = time.time()
    first = int(now * 1000)
    attempts, t = 1, 0.0
    while True:
        c = claimed(fails=attempts - 1, first_ms=first - int(t * 1000))
        a = s._classify(c, 503, "", "", 1.0, None)
        if a.next == "dead":
            break
        t += a.retry_ms / 1000
        attempts += 1
    assert attempts == 9 and 22 * 3600 < t < 23 * 3600


def test_a_secret_must_be_base64_of_sixteen_bytes_or_more() -> None:
    import base64

    from notifier.sender import signer

    good = "whsec_" + base64.b64encode(b"0123456789abcdef").decode()
    assert signer(good) is not None and signer(good.removeprefix("whsec_")) is not None
    for bad in ("", "whsec_", "whsec_" + base64.b64encode(b"short").decode(), "not base64!"):
        with pytest.raises(ValueError, match="Standard Webhooks secret") as e:
            signer(bad)
        assert "short" not in str(e.value) and "not base64!" not in str(e.value)


def test_the_default_delivery_ttl_is_the_same_in_python_lua_and_config() -> None:
    from sluice.queue.scripts import script_source
    from sluice.records import HOOK_TTL_S

    assert WebhooksConfig().record_ttl_s == HOOK_TTL_S
    assert f"local HOOK_TTL_S = {HOOK_TTL_S}" in script_source("submit")


def _attempt_with_resolver_error(err: BaseException, client_errors: int) -> Attempt:
    """One real Sender attempt whose resolver raises ``err`` (no network reached)."""

    async def resolver(host: str, port: int) -> list[str]:
        raise err

    cfg = WebhooksConfig(max_client_error_attempts=3, retry_schedule_s=[5])

    async def go() -> Attempt:
        sender = Sender(cfg, Guard(cfg, resolver))
        try:
            c = claimed(fails=client_errors, client_errors=client_errors)
            return await sender.attempt(c, "{}", signer("whsec_" + "A" * 24), 5.0)
        finally:
            await sender.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize(
    "err",
    [
        socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"),
        socket.gaierror(socket.EAI_FAIL, "Non-recoverable failure in name resolution"),
        TimeoutError("resolver timed out"),
    ],
)
def test_a_temporary_dns_failure_is_a_network_error_retried_not_a_client_error(
    err: BaseException,
) -> None:
    """A resolver outage must not dead-letter deliveries: even at the last client
    error allowed, a temporary failure retries (the horizon, not the count, ends it)."""
    a = _attempt_with_resolver_error(err, client_errors=2)
    assert a.next == "retry" and not a.client_error and a.result == "connect", a
    assert "temporary" in a.error


def test_a_name_that_does_not_exist_stays_a_client_error() -> None:
    err = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert _attempt_with_resolver_error(err, client_errors=0).client_error
    a = _attempt_with_resolver_error(err, client_errors=2)
    assert a.next == "dead" and a.client_error and a.result == "refused"


@pytest.mark.parametrize(
    ("err", "temporary"),
    [
        (socket.gaierror(socket.EAI_AGAIN, ""), True),
        (socket.gaierror(socket.EAI_FAIL, ""), True),
        (socket.gaierror(socket.EAI_MEMORY, ""), True),
        (socket.gaierror(socket.EAI_SYSTEM, ""), True),
        (TimeoutError(), True),
        (ConnectionResetError(), True),
        (socket.gaierror(socket.EAI_NONAME, ""), False),
        (socket.gaierror(socket.EAI_NODATA, ""), False),
        (socket.gaierror(socket.EAI_ADDRFAMILY, ""), False),
        (UnicodeError("label empty or too long"), False),
        (ValueError("bad"), False),
    ],
)
def test_which_resolver_errors_are_temporary(err: BaseException, temporary: bool) -> None:
    assert dns_failure_is_temporary(err) is temporary
