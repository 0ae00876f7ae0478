"""The gateway's side of webhooks: which URL a submit reports to, checked at submit.

A submit names a webhook, or its API key has a default one. The URL must pass the
SSRF guard and the allow-list (the key's, else the config's) and a signing
secret must exist for it, or the submit is refused with 422 and the reason:
nothing is queued that could never be delivered.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.schemas import WebhookSpec
from sluice.apikeys import ApiKey
from sluice.config import WebhooksConfig
from sluice.errors import ConfigError, WebhookRefused
from sluice.jobs import WEBHOOK_EVENTS, Webhook
from sluice.webhooks.guard import Guard
from sluice.webhooks.secret import config_secret

BULK_EVENTS: tuple[str, ...] = ("completed", "failed", "cancelled")


class WebhookPolicy:
    def __init__(self, cfg: WebhooksConfig) -> None:
        self.cfg = cfg
        self.guard = Guard(cfg)
        try:
            self.has_secret = config_secret(cfg) is not None
        except ConfigError:
            self.has_secret = False  # the notifier says why, at its start

    async def resolve(
        self,
        url: str | None,
        events: Sequence[str] | None,
        key: ApiKey | None,
        all_events: tuple[str, ...] = WEBHOOK_EVENTS,
    ) -> Webhook | None:
        """The submit's webhook (its own URL, else its key's default), or None."""
        url = url or (key.webhook_url if key is not None else None)
        if not url:
            return None
        if not self.has_secret and not (key is not None and key.webhook_secret):
            raise WebhookRefused(
                "webhooks are off on this gateway: no signing secret is configured "
                f"(webhooks.secret_env {self.cfg.secret_env or '-'} or webhooks.secret_file)"
            )
        allow = self.cfg.allow_hosts
        if key is not None and key.webhook_allow_hosts is not None:
            allow = list(key.webhook_allow_hosts)
        await self.guard.admit(url, allow)
        chosen = tuple(dict.fromkeys(events)) if events else all_events
        unknown = [e for e in chosen if e not in all_events]
        if unknown:
            raise WebhookRefused(
                f"webhook.events: {unknown} unknown; use some of {list(all_events)}"
            )
        return Webhook(url, chosen)

    async def for_spec(self, spec: WebhookSpec | None, key: ApiKey | None) -> Webhook | None:
        if spec is None:
            return await self.resolve(None, None, key)
        return await self.resolve(spec.url, spec.events, key)
