"""The REST gateway: the only process clients talk to (API reference: docs/api.md).

What it owns:

- **The HTTP API under** ``/v1``: submit a job or a batch, read and long-poll
  it, cancel it, bulk uploads, model listings (``routers/``, one module per
  resource), with request and response bodies in ``schemas.py`` and strict
  JSON parsing in ``strict_json.py``. ``app.py: create_app(config)`` builds
  it; ``serve.py`` serves it on one listener, or two with an admin port.
- **Admission**: estimating each job's cost, picking its bucket, shedding by
  priority and computing ``Retry-After`` (``service.py``, the pure rules in
  ``admission.py``); the queue itself lives in ``sluice.queue``.
- **Long-poll**: one pub/sub subscription per process wakes waiting requests
  (``completions.py``).
- **Errors**: the one table from ``sluice.errors`` to HTTP status and the one
  ``{"error": {"type", "message"}}`` body (``errors.py``), used by routes and by
  the ASGI guards alike.
- **Guards**, pure ASGI: API and admin keys (``auth.py``), body size and media
  type, and request metrics (``middleware.py``).
- **Observability**: ``/metrics`` (``metrics.py``, gauges from the background
  snapshots in ``snapshots.py``), ``/healthz`` and ``/readyz``, and the live
  dashboard (``dashboard/``).

It holds no state of its own beyond a process (``state.py``): every job lives
in Redis, so gateways are stateless replicas. It never imports torch.
"""
