"""Where a webhook may call: URL rules, host allow-lists and the SSRF guard.

A webhook makes the notifier open a connection that a client chose, from inside
the deployment. By default only public unicast addresses may be reached: a host
that resolves to loopback, private, link-local (169.254.0.0/16, the cloud metadata
address), shared, multicast or reserved ranges is refused, at submit (422 with the
reason) and again at every delivery, on the addresses the connection is then made
to (no window for a DNS answer that changes in between: docs/adr/0131).
``webhooks.allow_networks`` opens named networks (a receiver inside the cluster;
tests use 127.0.0.1/32).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from sluice.config import WebhooksConfig
from sluice.errors import WebhookHostUnresolved, WebhookRefused

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]
MAX_URL = 2048
CACHE_S = 30.0  # a submit's DNS answer is reused this long (the delivery resolves anew)
CACHE_MAX = 4096


@dataclass(frozen=True, slots=True)
class Target:
    """A webhook URL taken apart: what a connection needs."""

    url: str
    scheme: str
    host: str  # lowercase, IPv6 without brackets
    port: int


def parse_url(url: str, allow_http: bool) -> Target:
    """The URL's parts, or WebhookRefused saying what is wrong with it."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL:
        raise WebhookRefused(f"webhook.url must be 1-{MAX_URL} characters")
    if not url.isprintable() or any(c.isspace() for c in url):
        raise WebhookRefused("webhook.url must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise WebhookRefused(f"webhook.url is not a URL: {e}") from e
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise WebhookRefused(f"webhook.url: scheme {scheme or '(none)'!r} is not https")
    if scheme == "http" and not allow_http:
        raise WebhookRefused("webhook.url must be https (webhooks.allow_http is off)")
    if parts.username is not None or parts.password is not None:
        raise WebhookRefused("webhook.url must not carry credentials (user:password@)")
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        raise WebhookRefused("webhook.url has no host")
    if port == 0:
        raise WebhookRefused("webhook.url: port 0 is not a port")
    import httpx  # here, not at start: a gateway pays for it with its first webhook

    try:  # what the notifier's client will parse: refused here, not at every attempt
        httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as e:
        raise WebhookRefused(f"webhook.url is not a URL: {e}") from e
    return Target(
        url, scheme, host, port if port is not None else (443 if scheme == "https" else 80)
    )


def host_allowed(host: str, allow_hosts: Sequence[str]) -> bool:
    """Whether ``host`` is named by the allow-list (empty: any host). An entry
    ``*.example.com`` names the subdomains of example.com, not example.com itself."""
    if not allow_hosts:
        return True
    for entry in allow_hosts:
        e = entry.lower().rstrip(".")
        if e.startswith("*.") and host.endswith(e[1:]) and len(host) > len(e) - 1:
            return True
        if host == e:
            return True
    return False


# IPv6 prefixes whose last 32 bits are an IPv4 address the packet reaches.
_V4_IN_V6 = [
    ipaddress.ip_network(n)
    for n in (
        "::ffff:0:0/96",  # IPv4-mapped
        "::/96",  # IPv4-compatible (deprecated; still routed by some stacks)
        "::ffff:0:0:0/96",  # SIIT
        "64:ff9b::/96",  # NAT64, well-known prefix
        "64:ff9b:1::/48",  # NAT64, local use
    )
]


def embedded_v4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (None: it stands for itself)."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]  # the client's address, where the packet goes
    for net in _V4_IN_V6:
        if ip in net and int(ip) & 0xFFFFFFFF and ip != ipaddress.IPv6Address("::1"):
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


class Guard:
    """The checks, with the networks config opens; ``resolver`` is replaceable in tests."""

    def __init__(self, cfg: WebhooksConfig, resolver: Resolver | None = None) -> None:
        self.cfg = cfg
        self.open = [ipaddress.ip_network(n, strict=False) for n in cfg.allow_networks]
        self.resolver = resolver or _getaddrinfo
        self._cache: dict[tuple[str, int], tuple[float, list[IPAddress]]] = {}
        # URLs a submit admitted lately, by allow-list: the hot path checks a URL once
        # per CACHE_S, not per job (the delivery checks it again, every time).
        self._admitted: dict[tuple[str, tuple[str, ...]], float] = {}

    def reachable(self, ip: IPAddress) -> bool:
        """A public unicast address, or one in a network config opens. An IPv6
        address that carries an IPv4 one (mapped, compatible, NAT64, 6to4, Teredo,
        SIIT) is judged by the IPv4 address it reaches."""
        if any(ip in net for net in self.open):
            return True
        inner = embedded_v4(ip)
        if inner is not None:
            return self.reachable(inner)
        if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
            return False
        return ip.is_global and not ip.is_multicast

    def _why(self, ip: IPAddress) -> str:
        inner = embedded_v4(ip)
        if inner is not None:
            ip = inner
        for name in ("unspecified", "loopback", "link_local", "multicast", "private", "reserved"):
            if getattr(ip, f"is_{name}", False):
                return f"a {name.replace('_', '-')} address"
        return "not a public address"

    def check(self, target: Target, addresses: Sequence[IPAddress]) -> None:
        for ip in addresses:
            if not self.reachable(ip):
                raise WebhookRefused(
                    f"webhook.url: {target.host} resolves to {ip}, {self._why(ip)}; "
                    "webhooks.allow_networks can open it"
                )

    async def resolve(self, target: Target, cached: bool = False) -> list[IPAddress]:
        """Every address of the host (a literal is its own), each one reachable; the
        first is the one to connect to. ``cached``: a submit reuses recent answers."""
        lit = _literal(target.host)
        if lit is not None:
            found = [lit]
        else:
            key = (target.host, target.port)
            hit = self._cache.get(key) if cached else None
            if hit is not None and hit[0] > time.monotonic():
                found = hit[1]
            else:
                try:
                    raw = await self.resolver(target.host, target.port)
                except (OSError, UnicodeError, ValueError) as e:  # IDNA: a bad label
                    if dns_failure_is_temporary(e):
                        raise WebhookHostUnresolved(
                            f"webhook.url: {target.host} does not resolve now "
                            f"(a temporary DNS failure: {type(e).__name__})"
                        ) from e
                    raise WebhookRefused(f"webhook.url: {target.host} does not resolve") from e
                found = [ipaddress.ip_address(a.split("%", 1)[0]) for a in raw]
                if not found:
                    raise WebhookRefused(f"webhook.url: {target.host} does not resolve")
                if len(self._cache) >= CACHE_MAX:
                    self._cache.clear()
                self._cache[key] = (time.monotonic() + CACHE_S, found)
        self.check(target, found)
        return found

    async def admit(self, url: str, allow_hosts: Sequence[str]) -> None:
        """A submit's check: the URL's form, the allow-list, the resolved addresses
        (a URL admitted in the last CACHE_S under the same allow-list passes at once)."""
        key = (url, tuple(allow_hosts))
        if self._admitted.get(key, 0.0) > time.monotonic():
            return
        target = parse_url(url, self.cfg.allow_http)
        if not host_allowed(target.host, allow_hosts):
            raise WebhookRefused(
                f"webhook.url: host {target.host!r} is not on this API key's (or the "
                "config's) webhook allow-list"
            )
        await self.resolve(target, cached=True)
        if len(self._admitted) >= CACHE_MAX:
            self._admitted.clear()
        self._admitted[key] = time.monotonic() + CACHE_S


# getaddrinfo's answers that say the name (or the request) is wrong, not that the
# resolver failed: asking again later gives the same answer.
_PERMANENT_EAI = frozenset(
    getattr(socket, n)
    for n in (
        "EAI_NONAME",  # NXDOMAIN
        "EAI_NODATA",  # the name exists without an address
        "EAI_ADDRFAMILY",
        "EAI_FAMILY",
        "EAI_SERVICE",
        "EAI_SOCKTYPE",
        "EAI_BADFLAGS",
    )
    if hasattr(socket, n)
)


def dns_failure_is_temporary(e: BaseException) -> bool:
    """Whether a resolver error may pass by itself (EAI_AGAIN, EAI_FAIL, a timeout,
    a reset): a delivery retries it to the horizon instead of counting it as the
    receiver's fault. A name that does not exist or cannot be encoded is permanent."""
    if isinstance(e, socket.gaierror):
        return e.errno not in _PERMANENT_EAI
    return isinstance(e, OSError)  # UnicodeError, ValueError: a malformed name


async def _getaddrinfo(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    seen: list[str] = []
    for info in infos:
        addr = str(info[4][0])
        if addr not in seen:
            seen.append(addr)
    return seen
