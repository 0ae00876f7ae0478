"""Completion webhooks: signed, retried calls to a client when its job (or bulk job)
ends, sent by ``sluice notifier`` processes (docs/webhooks.md, docs/adr/0131)."""
