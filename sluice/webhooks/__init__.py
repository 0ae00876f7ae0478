"""Completion webhooks' protocol: signed, retried calls to a client when its job (or
bulk job) ends (docs/webhooks.md, docs/adr/0131).

Owns what a delivery is in Redis and the scripts that enqueue, claim and settle
it (``ops``, ``lua/``), the SSRF guard both the gateway and the notifier apply
(``guard``) and the config's signing secret (``secret``). The process that sends
deliveries, ``sluice notifier``, is its own package (notifier/)."""
