"""sluice: the core every Sluice process shares, and the ``sluice`` command.

What Redis holds and how it is read and written: key names (``keys``), record
layouts shared with Lua (``records``), the queue protocol and its scripts
(``queue``, ``lua/``), the bulk protocol (``bulk``: records and scripts, line
parsing, queueing a coordinator slice on RQ, the client's ``sluice bulk``
commands), the webhook protocol (``webhooks``: deliveries and their scripts, the
SSRF guard, the signing secret), the worker registry (``registry``), job records
(``jobs``), API keys (``apikeys``), queue-wait histograms (``waits``).
Shared plumbing: the config schema (``config``; the environment variables that
name the file and Redis in ``envnames``), the error table (``errors``),
Redis clients from one URL (``connection``), reconnect backoff (``backoff``),
cost estimation (``cost``), how CPU workers divide the cores (``cores``), JSON
(``fastjson``), redaction of secrets (``redact``), trace files (``tracefile``),
the Python client (``client``).
The ``sluice`` command: ``cli`` with ``cli_common``, ``sluice submit``
(``submit_cli``), ``sluice status`` (``status``), and the kit for a stack on one
machine (``local``: ``sluice up``, ``sluice redis``, child processes). The other
commands come from the process packages named in ``cli.PLUGINS`` (gateway,
workers, autoscaler, notifier, bulkworker) and from sluicebench: the only place
sluice/ imports them. Each process's own code lives in its package, not here.
sluice/ never imports torch.
"""
