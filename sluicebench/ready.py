"""Waiting for a server a benchmark started to answer: one helper for every bench.

Polls with one ``httpx.Client`` for all the looks (each new client builds a TLS
context, some 50 ms of CPU, about all a look costs) and sleeps between looks after
a refusal and after an answer not yet good alike, so a 503 is never spun on.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx


def _is_200(resp: httpx.Response) -> bool:
    return resp.status_code == 200


def wait_ready(
    url: str,
    timeout_s: float,
    ok: Callable[[httpx.Response], bool] = _is_200,
    *,
    every_s: float = 0.2,
    exited: Callable[[], str | None] = lambda: None,
) -> bool:
    """Until GET ``url`` gives an answer ``ok`` accepts (True) or ``timeout_s``
    passes (False). ``exited`` says why the server is gone (a RuntimeError), else None."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=min(5.0, max(1.0, every_s * 5))) as client:
        while time.monotonic() < deadline:
            why = exited()
            if why:
                raise RuntimeError(why)
            try:
                if ok(client.get(url)):
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(every_s)
    return False
