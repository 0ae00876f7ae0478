"""notifier: the webhook notifier process (``sluice notifier``).

Owns the process: its loop (``loop``: claim due deliveries with a lease, send,
record each attempt, metrics on ``webhooks.metrics_port``), the HTTP sender that
signs and classifies one attempt (``sender``), and its command (``cli``, plugged
into ``sluice`` through sluice/cli.py's ``PLUGINS``).

Does not own the webhook protocol: what a delivery is in Redis, its Lua scripts,
the SSRF guard and the config's signing secret live in the core
(``sluice.webhooks``), because the gateway (which accepts webhooks) and the
queue's completion scripts (which enqueue deliveries) use them too. Imports the
core only, never another process package (tests/pure/repo/test_import_rules.py);
never imports torch (docs/webhooks.md, docs/adr/0131).
"""
