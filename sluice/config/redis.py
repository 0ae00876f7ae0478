"""How every process reaches Redis: a Sentinel service or a Cluster (the URL itself
is the file's top-level ``redis_url``)."""

from __future__ import annotations

from pydantic import Field

from sluice.config.base import StrictModel


class SentinelConfig(StrictModel):
    """Reach Redis through Sentinel: redis-py finds the primary, and again after a
    failover. Compiles to a ``redis+sentinel://`` URL (sluice/connection.py)."""

    addresses: list[str] = Field(min_length=1)  # host:port of each sentinel
    service_name: str = Field(min_length=1)
    username: str | None = None
    password: str | None = None  # the primary's (and replicas')
    sentinel_password: str | None = None
    db: int = Field(0, ge=0)
    tls: bool = False  # TLS to the primary
    sentinel_tls: bool = False


class RedisConfig(StrictModel):
    sentinel: SentinelConfig | None = None
    # redis_url names one node of a Redis Cluster; redis-py learns the rest.
    cluster: bool = False
