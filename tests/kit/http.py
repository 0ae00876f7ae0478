"""One HTTP client for the tests' looks at a local server (polls, probes).

``httpx.get`` builds a client for every call, and with it a TLS context from the
CA bundle: some 50 ms of CPU, nearly all a look at a local server costs, so a test
polling a gateway every 10-100 ms spent most of a core on it. ``HTTP`` builds one
context for the process and keeps no connection open: each request connects
afresh, as ``httpx.get`` does (the fault tests kill and restart the servers they
poll). It is safe to share between threads.
"""

from __future__ import annotations

import httpx

HTTP = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))
