"""The completion webhooks' section of the config file."""

from __future__ import annotations

import ipaddress

from pydantic import Field, field_validator

from sluice.config.base import StrictModel


class WebhooksConfig(StrictModel):
    """Completion webhooks (docs/webhooks.md, ADR 0131): who may be called back, how
    deliveries are signed and retried, and the notifier process that sends them."""

    # The Standard Webhooks signing secret ("whsec_" + base64), from an environment
    # variable or a file (e.g. a mounted Secret); an API key's own secret wins.
    # Without any secret a submit that asks for a webhook is refused (422).
    secret_env: str | None = "SLUICE_WEBHOOK_SECRET"
    secret_file: str | None = None
    # Without API keys (or for a key that sets none): the hosts a webhook may name
    # ("api.example.com", or "*.example.com" for its subdomains); empty = any host.
    allow_hosts: list[str] = Field(default_factory=list)
    # Networks a webhook may reach although private, loopback or link-local (SSRF
    # guard): e.g. ["10.1.2.0/24"] for a receiver inside the cluster. Never the default.
    allow_networks: list[str] = Field(default_factory=list)
    # Plain http:// URLs (https only by default).
    allow_http: bool = False
    # A PEM bundle of the CAs that receivers' certificates are verified against
    # (None: the system's, via certifi); for receivers behind a private CA.
    ca_file: str | None = None
    # Retries: the delay before each next attempt (the last repeats), +-jitter,
    # until horizon_s after the job ended; 2xx ends it, 410 stops it, 429/5xx/timeouts
    # retry, any other status retries max_client_error_attempts times in all.
    retry_schedule_s: list[float] = Field(
        default_factory=lambda: [5.0, 30.0, 120.0, 600.0, 3600.0, 10800.0, 21600.0, 43200.0]
    )
    jitter: float = Field(0.2, ge=0, lt=1)
    horizon_s: float = Field(86400.0, gt=0)
    max_client_error_attempts: int = Field(3, gt=0)
    # A result up to this size (its JSON) rides in the body; larger ones are a link.
    max_result_bytes: int = Field(256 * 1024, gt=0)
    # Base URL of the gateway for those links (None: a path, /v1/jobs/{id}).
    public_url: str | None = None
    # The notifier: attempts in flight, at most per host, and its timeouts.
    max_concurrency: int = Field(64, gt=0)
    per_host_connections: int = Field(8, gt=0)
    connect_timeout_s: float = Field(5.0, gt=0)
    timeout_s: float = Field(15.0, gt=0)
    # Response bodies are read up to this many bytes (the rest is dropped).
    max_response_bytes: int = Field(4096, gt=0)
    metrics_port: int = Field(0, ge=0, lt=65536)

    @field_validator("retry_schedule_s")
    @classmethod
    def _schedule(cls, v: list[float]) -> list[float]:
        if not v or any(d <= 0 for d in v):
            raise ValueError("retry_schedule_s needs at least one delay, each > 0")
        return v

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        for net in v:
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError as e:
                raise ValueError(f"allow_networks: {net!r} is not a network ({e})") from e
        return v

    @property
    def record_ttl_s(self) -> int:
        """How long a delivery's record lives: the horizon and a day to read it."""
        return int(self.horizon_s) + 86400
