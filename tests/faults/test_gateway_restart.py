"""A gateway restarted (SIGTERM, SIGKILL) while clients long-poll: the clients'
retries (``sluice.client``) ride it out and every client gets its job's result."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from sluice.client import Client
from tests.faults.conftest import MODEL, Stack, fault_config, wait_gateway_sees

pytestmark = [pytest.mark.slow]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_clients_long_polling_through_a_gateway_restart_get_their_results(
    stack_factory: Callable[..., Stack], sig: signal.Signals
) -> None:
    s = stack_factory()
    # Two jobs per 1.2 s batch: 12 jobs end between 1 and 8 s from now, most of
    # them after the restart.
    cfg = fault_config(params={"base_ms": 1200}, batching={"max_batch": 2})
    path = s.write_config(cfg)
    gw, url = s.spawn_gateway(path)
    s.spawn_worker(path)
    wait_gateway_sees(url)
    with Client(url) as c:
        ids = [c.submit(MODEL, f"job {i}")["id"] for i in range(12)]
    got: dict[str, Any] = {}
    errors: list[str] = []

    def wait_one(job_id: str) -> None:
        try:
            with Client(url, max_retries=30) as c:  # its own connection, like a real client
                got[job_id] = c.result(job_id, timeout_s=40)
        except Exception as e:  # noqa: BLE001 - recorded and asserted below
            errors.append(f"{job_id}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=wait_one, args=(j,), daemon=True) for j in ids]
    for t in threads:
        t.start()
    time.sleep(1.0)  # every client is inside a long-poll now
    assert len(got) < len(ids) - 4  # most are still waiting when the gateway goes
    t0 = time.monotonic()
    gw.signal(sig)
    code = gw.popen.wait(15)
    stopped_s = time.monotonic() - t0
    if sig == signal.SIGTERM:
        assert code in (0, -signal.SIGTERM), gw.text()  # uvicorn re-raises the signal
        # Long-polls were ended at once (503, retry), not waited for and then cut.
        assert stopped_s < 3 and "Traceback" not in gw.text(), gw.text()
    again = s.restart(gw)
    for t in threads:
        t.join(45)
    assert not errors, errors
    assert sorted(got) == sorted(ids)
    assert all(job["status"] == "succeeded" and job["result"]["tokens"] == 2
               for job in got.values())  # fmt: skip
    assert again.alive()
