"""Every Redis client Sluice builds: one Redis, Sentinel or Cluster, from one URL.

A deployment names its Redis with one URL (``redis_url`` in the config file,
``--redis-url`` or ``SLUICE_REDIS_URL``); the ``redis:`` block of the config file
compiles to the same URL, so every process (gateway, workers, autoscaler,
notifier, bulk workers, ``sluice status``) reaches the same Redis the same way:

- ``redis://[[user]:password@]host:port/db`` (``rediss://`` for TLS): one server,
  or a managed service's primary endpoint that follows failover itself.
- ``redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db]``
  (``rediss+sentinel://`` for TLS to the primary; query ``sentinel_password=``,
  ``sentinel_tls=true``): redis-py's :class:`~redis.sentinel.Sentinel` finds the
  primary and finds it again after a failover.
- ``redis+cluster://[[user]:password@]host:port[,host:port...]``
  (``rediss+cluster://``): redis-py's :class:`~redis.cluster.RedisCluster`
  follows the slot map, ``MOVED`` and ``ASK`` (docs/adr/0132).

Discovery is redis-py's; this module only parses the URL and sets the same
bounded timeouts and retry policy on every kind.
"""

from __future__ import annotations

import ssl as _ssl
from dataclasses import dataclass, field
from typing import Any, Literal, cast
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    ClusterError,
    ReadOnlyError,
    RedisClusterException,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from redis.sentinel import Sentinel

from sluice.errors import ConfigError
from sluice.redact import redact_url

Kind = Literal["redis", "sentinel", "cluster"]
DEFAULT_URL = "redis://127.0.0.1:6379/0"
SENTINEL_PORT = 26379

# What a failover or a slot move looks like to a caller: the gateway answers 503 with
# Retry-After, workers keep their batch and retry. ReadOnlyError: a demoted primary
# still answering on an old connection; TryAgain/ClusterDown: a slot mid-migration or
# a shard without a primary yet.
UNAVAILABLE_ERRORS = (
    RedisConnectionError,
    RedisTimeoutError,
    BusyLoadingError,
    ReadOnlyError,
    TryAgainError,
    ClusterDownError,
    ClusterError,  # redis-py gave up following MOVED/ASK/TRYAGAIN ("TTL exhausted")
    RedisClusterException,
    OSError,
)


@dataclass(frozen=True)
class RedisTarget:
    """A parsed Redis URL: which kind of deployment, where, and how to log in."""

    kind: Kind
    nodes: tuple[tuple[str, int], ...]
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False
    service_name: str = ""
    sentinel_password: str | None = None
    sentinel_tls: bool = False
    # TLS files from the query (ssl_ca_certs, ssl_certfile, ssl_keyfile), as redis-py
    # reads them from a rediss:// URL: a private CA for Sentinel and Cluster too.
    tls_files: tuple[tuple[str, str], ...] = ()
    url: str = field(default="", repr=False)

    @property
    def where(self) -> str:
        """Where it points, without credentials (for errors and logs)."""
        hosts = ",".join(f"{h}:{p}" for h, p in self.nodes)
        if self.kind == "sentinel":
            return f"sentinel service {self.service_name!r} at {hosts}"
        if self.kind == "cluster":
            return f"cluster at {hosts}"
        return redact_url(self.url)


_SCHEMES: dict[str, tuple[Kind, bool]] = {
    "redis": ("redis", False),
    "rediss": ("redis", True),
    "unix": ("redis", False),
    "redis+sentinel": ("sentinel", False),
    "rediss+sentinel": ("sentinel", True),
    "redis+cluster": ("cluster", False),
    "rediss+cluster": ("cluster", True),
}


TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


def _truthy(q: dict[str, list[str]], name: str) -> bool:
    return q.get(name, ["no"])[-1].lower() in ("1", "true", "yes", "on")


def _nodes(netloc: str, default_port: int, url_kind: str) -> tuple[tuple[str, int], ...]:
    hosts = netloc.rpartition("@")[2]
    out = []
    for part in hosts.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep:
            host, port = port, str(default_port)
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{url_kind} URL: bad host:port {part.strip()!r}")
        out.append((host, int(port)))
    return tuple(out)


def parse_url(url: str) -> RedisTarget:
    """A :class:`RedisTarget`, or ConfigError naming what is wrong (never the password)."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in _SCHEMES:
        raise ConfigError(
            f"Redis URL scheme {scheme or '(none)'!r}: use redis://, rediss://, unix://, "
            "redis+sentinel:// or redis+cluster://"
        )
    kind, tls = _SCHEMES[scheme]
    if kind == "redis":
        return RedisTarget("redis", (), tls=tls, url=url)
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    user, _, pw = userinfo.partition(":")
    q = parse_qs(parts.query)
    path = [p for p in parts.path.split("/") if p]
    common: dict[str, Any] = {
        "username": unquote(user) or None,
        "password": unquote(pw) or None,
        "tls": tls,
        "tls_files": tuple((k, q[k][-1]) for k in TLS_FILES if q.get(k)),
        "url": url,
    }
    if kind == "cluster":
        if path and path != ["0"]:
            raise ConfigError("redis+cluster URL: a cluster has only database 0")
        return RedisTarget("cluster", _nodes(parts.netloc, 6379, scheme), **common)
    if not path:
        raise ConfigError(
            "redis+sentinel URL needs the service name: redis+sentinel://host:26379/mymaster"
        )
    if len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ConfigError("redis+sentinel URL: the path is /service_name[/db]")
    sentinel_pw = q.get("sentinel_password", [""])[-1]
    return RedisTarget(
        "sentinel",
        _nodes(parts.netloc, SENTINEL_PORT, scheme),
        db=int(path[1]) if len(path) == 2 else 0,
        service_name=unquote(path[0]),
        sentinel_password=sentinel_pw or None,
        sentinel_tls=_truthy(q, "sentinel_tls"),
        **common,
    )


def sentinel_url(
    addresses: list[str],
    service_name: str,
    *,
    password: str | None = None,
    username: str | None = None,
    db: int = 0,
    tls: bool = False,
    sentinel_password: str | None = None,
    sentinel_tls: bool = False,
) -> str:
    """The ``redis+sentinel://`` URL for a config file's ``redis.sentinel`` block."""
    auth = ""
    if password or username:
        auth = f"{quote(username or '', safe='')}:{quote(password or '', safe='')}@"
    query = {}
    if sentinel_password:
        query["sentinel_password"] = sentinel_password
    if sentinel_tls:
        query["sentinel_tls"] = "true"
    scheme = "rediss+sentinel" if tls else "redis+sentinel"
    qs = f"?{urlencode(query)}" if query else ""
    return f"{scheme}://{auth}{','.join(addresses)}/{quote(service_name, safe='')}/{db}{qs}"


def as_cluster_url(url: str) -> str:
    """``redis://host:port/0`` (one node, ``redis.cluster: true``) as a cluster URL."""
    t = parse_url(url)
    if t.kind != "redis" or url.lower().startswith("unix:"):
        raise ConfigError("redis.cluster: redis_url must be redis:// or rediss:// (a node)")
    scheme, rest = url.split("://", 1)
    netloc = rest.split("/", 1)[0].split("?", 1)[0]
    return f"{scheme.lower()}+cluster://{netloc}"


@dataclass(frozen=True)
class ClientOptions:
    """How one client behaves: timeouts (seconds), pool size, retry policy."""

    timeout_s: float = 5.0
    # None: no read timeout (a pub/sub connection waits for messages).
    read_timeout_s: float | None = 5.0
    max_connections: int | None = None
    # One quick retry rides out a dropped connection; callers handle longer outages
    # (503 at the gateway, back-off in workers). redis-py's default retries for
    # seconds, far past the timeout.
    retries: int = 1
    backoff: bool = True
    keepalive: bool = False
    decode: bool = True


def _conn_kwargs(t: RedisTarget, o: ClientOptions) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "decode_responses": o.decode,
        "socket_timeout": o.read_timeout_s,
        "socket_connect_timeout": o.timeout_s,
        "health_check_interval": 30,
    }
    if o.keepalive:
        kw["socket_keepalive"] = True
    if t.username:
        kw["username"] = t.username
    if t.password:
        kw["password"] = t.password
    return kw


def _backoff(o: ClientOptions) -> ExponentialBackoff | NoBackoff:
    return ExponentialBackoff(cap=0.2, base=0.02) if o.backoff else NoBackoff()


def _tls_kwargs(t: RedisTarget) -> dict[str, Any]:
    return {"ssl": True, "ssl_cert_reqs": _ssl.CERT_REQUIRED, **dict(t.tls_files)}


def _sentinel_kwargs(t: RedisTarget, o: ClientOptions, retry: Any) -> dict[str, Any]:
    # The same bounded retry as every other connection: redis-py's default retries a
    # sentinel that refuses for seconds before asking the next one.
    kw: dict[str, Any] = {
        "socket_timeout": o.timeout_s,
        "socket_connect_timeout": o.timeout_s,
        "retry": retry,
    }
    if t.sentinel_password:
        kw["password"] = t.sentinel_password
    if t.sentinel_tls:
        kw.update(_tls_kwargs(t))
    return kw


def sync_client(url: str, opts: ClientOptions | None = None) -> redis.Redis:
    """A redis-py client for ``url``: a plain ``Redis`` for one server, one whose pool
    follows Sentinel's primary, or a ``RedisCluster`` (typed as ``Redis``: it serves
    every command Sluice sends)."""
    o = opts or ClientOptions()
    t = parse_url(url)
    retry = Retry(_backoff(o), o.retries)
    kw = _conn_kwargs(t, o)
    if o.max_connections:
        kw["max_connections"] = o.max_connections
    if t.kind == "redis":
        return redis.Redis.from_url(url, retry=retry, **kw)
    if t.tls:
        kw.update(_tls_kwargs(t))
    if t.kind == "sentinel":
        s = Sentinel(list(t.nodes), sentinel_kwargs=_sentinel_kwargs(t, o, retry))
        return s.master_for(t.service_name, db=t.db, retry=retry, **kw)
    kw.pop("health_check_interval")
    nodes = [ClusterNode(h, p) for h, p in t.nodes]
    cluster = RedisCluster(startup_nodes=nodes, retry=retry, **kw)
    return cast(redis.Redis, cluster)


def async_client(url: str, opts: ClientOptions | None = None) -> aioredis.Redis:
    """The asyncio twin of :func:`sync_client`."""
    o = opts or ClientOptions()
    t = parse_url(url)
    retry = AsyncRetry(_backoff(o), o.retries)
    kw = _conn_kwargs(t, o)
    if t.kind == "redis":
        pool = aioredis.ConnectionPool.from_url(
            url, retry=retry, max_connections=o.max_connections, **kw
        )
        client = aioredis.Redis(connection_pool=pool)
        # The client owns its pool, so aclose() closes its sockets too.
        client.auto_close_connection_pool = True
        return client
    if t.tls:
        kw.update(_tls_kwargs(t))
    if t.kind == "sentinel":
        if o.max_connections:
            kw["max_connections"] = o.max_connections
        s = AsyncSentinel(list(t.nodes), sentinel_kwargs=_sentinel_kwargs(t, o, retry))
        client = s.master_for(t.service_name, db=t.db, retry=retry, **kw)
        client.auto_close_connection_pool = True
        return client
    kw.pop("health_check_interval")
    if o.max_connections:
        kw["max_connections"] = o.max_connections
    nodes = [AsyncClusterNode(h, p) for h, p in t.nodes]
    cluster = AsyncRedisCluster(startup_nodes=nodes, retry=retry, **kw)
    return cast(aioredis.Redis, cluster)


def slot_moving(e: BaseException) -> bool:
    """A script stopped by its slot guard (``_common.lua``): its slot is being moved
    between cluster nodes, nothing was written, and a retry will succeed."""
    return isinstance(e, redis.exceptions.ResponseError) and "non local key" in str(e)


def demoted(e: BaseException) -> bool:
    """WAIT refused because the server is a replica: the connection reached a demoted
    primary (a failover, and the old primary back as a replica of the new one), whose
    scripts may still answer without writing, so redis-py's own ReadOnlyError check
    never sees it and never makes the connection ask Sentinel again."""
    return isinstance(e, redis.exceptions.ResponseError) and "used with replica" in str(e)


DEMOTED = "Redis: the primary reached is a replica now (a failover); reconnecting"


def forget_primary(r: Any) -> Any:
    """Drop ``r``'s connections, so the next ones ask Sentinel where the primary is (a
    coroutine for an asyncio client; None for a client without one pool)."""
    pool = getattr(r, "connection_pool", None)
    return pool.disconnect() if pool is not None else None


async def forget_primary_async(r: Any) -> None:
    """:func:`forget_primary` for an asyncio client."""
    dropping = forget_primary(r)
    if dropping is not None:
        await dropping


def is_cluster(r: Any) -> bool:
    return isinstance(r, RedisCluster | AsyncRedisCluster)


def read_timeout_s(r: Any) -> float | None:
    """The socket read timeout a client was built with (None: none)."""
    if isinstance(r, RedisCluster):
        kwargs = r.nodes_manager.connection_kwargs
    elif isinstance(r, AsyncRedisCluster):
        kwargs = r.connection_kwargs
    else:
        kwargs = r.connection_pool.connection_kwargs
    value = kwargs.get("socket_timeout")
    return float(value) if value else None


def check(url: str, timeout_s: float = 2.0) -> None:
    """Reach the Redis ``url`` names once: ConfigError for a setting that can never
    work (no such Sentinel service, no sentinel answering, a cluster URL at a server
    without cluster mode, a malformed URL); a redis-py connection error when a
    plain server does not answer (the caller may wait that out)."""
    t = parse_url(url)
    opts = ClientOptions(timeout_s=timeout_s, read_timeout_s=timeout_s, retries=0)
    if t.kind == "sentinel":
        _check_sentinel(t, opts)
    try:
        client = sync_client(url, opts)
    except RedisClusterException as e:
        raise ConfigError(f"{t.where}: {_why_cluster(e)}") from e
    except (RedisConnectionError, RedisTimeoutError, OSError) as e:
        if t.kind == "cluster":
            raise ConfigError(f"{t.where}: no node answered: {e}") from e
        raise
    try:
        client.ping()
        if t.kind == "redis" and str(client.info("cluster").get("cluster_enabled")) == "1":
            raise ConfigError(
                f"{t.where}: the server is a Redis Cluster node: use redis+cluster:// "
                "(or redis.cluster: true in the config file)"
            )
    except ReadOnlyError as e:
        raise ConfigError(f"{t.where}: the server is a read-only replica") from e
    finally:
        client.close()


def _why_cluster(e: Exception) -> str:
    text = str(e)
    if "cluster mode is not enabled" in text.lower() or "cluster support disabled" in text.lower():
        return "the server is not in cluster mode (use redis:// for one server)"
    return text.splitlines()[0] if text else type(e).__name__


def _check_sentinel(t: RedisTarget, o: ClientOptions) -> None:
    s = Sentinel(list(t.nodes), sentinel_kwargs=_sentinel_kwargs(t, o, Retry(NoBackoff(), 0)))
    answered = 0
    for sentinel in s.sentinels:
        try:
            masters = sentinel.sentinel_masters()
        except (RedisConnectionError, RedisTimeoutError, OSError):
            continue
        except redis.exceptions.ResponseError as e:
            raise ConfigError(f"{t.where}: not a sentinel: {e}") from e
        answered += 1
        if t.service_name in masters:
            return
    if not answered:
        raise ConfigError(f"{t.where}: no sentinel answered")
    raise ConfigError(f"{t.where}: the sentinels know no service {t.service_name!r}")
