"""A gateway restarted (SIGTERM, SIGKILL) while clients long-poll: the clients'
retries (``sluice.client``) ride it out and every client gets its job's result.

Every test runs with one listener and with ``gateway.admin_port`` (two uvicorn
servers in one process, gateway/serve.py): a stop must end open long-polls the
same way in both (ADR 0067).

The restart tests share one redis-server and one model worker (module-scoped:
only the gateway is stopped, so a worker per test proved nothing more); each
starts, stops and restarts its own gateway, and stops the restarted one at its
end. The 503 tests run a gateway alone on their own Redis: no worker may take
their jobs."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from sluice.client import Client
from sluice.local.redis_server import free_port
from tests.kit.faults import MODEL, Proc, Stack, fault_config, make_stack, wait_gateway_sees
from tests.kit.http import HTTP
from tests.waits import wait_until

pytestmark = [pytest.mark.system]
LISTENERS = pytest.mark.parametrize("admin", [False, True], ids=["one-port", "admin-port"])
# What uvicorn logs when open requests held its shutdown for the whole graceful timeout.
GRACE_EXCEEDED = "timeout graceful shutdown exceeded"


def _restart_config(admin: bool) -> dict[str, Any]:
    """Two jobs per 1.2 s batch: 12 jobs end between 1 and 8 s after they are sent."""
    return fault_config(
        params={"base_ms": 1200}, batching={"max_batch": 2}, gateway=_gateway_section(admin)
    )


@dataclass
class Shared:
    stack: Stack
    worker: Proc


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    """One redis-server and one worker (of _restart_config's model) for the restarts."""
    s = make_stack(tmp_path_factory.mktemp("restart"))
    try:
        yield Shared(s, s.spawn_worker(s.write_config(_restart_config(False))))
    finally:
        s.teardown()


def _gateway_section(admin: bool) -> dict[str, Any]:
    return {"admin_port": free_port()} if admin else {}


def _metrics_url(url: str, cfg: dict[str, Any]) -> str:
    admin = cfg["gateway"].get("admin_port")
    return f"http://127.0.0.1:{admin}/metrics" if admin else f"{url}/metrics"


def longpoll_waiters(metrics_url: str) -> int:
    """``sluice_gateway_longpoll_waiters`` as the gateway exports it (-1 if unreadable)."""
    try:
        text = HTTP.get(metrics_url, timeout=2).text
    except httpx.HTTPError:
        return -1
    for line in text.splitlines():
        if line.startswith("sluice_gateway_longpoll_waiters "):
            return int(float(line.split()[1]))
    return -1


def _assert_clean_stop(gw: Proc) -> None:
    code = gw.popen.wait(15)
    log = gw.text()
    assert code == -signal.SIGTERM, log  # both setups re-raise the signal, as uvicorn does
    # Long-polls were ended at once (503, retry), not waited for and then cut.
    assert GRACE_EXCEEDED not in log and "Traceback" not in log, log


@LISTENERS
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_clients_long_polling_through_a_gateway_restart_get_their_results(
    shared: Shared, sig: signal.Signals, admin: bool
) -> None:
    s = shared.stack
    # 12 jobs end between 1 and 8 s from now, most of them after the restart.
    cfg = _restart_config(admin)
    gw, url = s.spawn_gateway(s.write_config(cfg))
    assert shared.worker.alive(), shared.worker.text()
    wait_gateway_sees(url, metrics_url=_metrics_url(url, cfg))
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
    metrics = _metrics_url(url, cfg)
    wait_until(
        lambda: longpoll_waiters(metrics) >= len(ids) - len(got),
        20,
        "every client to be inside a long-poll",
        every_s=0.1,
    )
    assert len(got) < len(ids) - 4  # most are still waiting when the gateway goes
    gw.signal(sig)
    if sig == signal.SIGTERM:
        _assert_clean_stop(gw)
    else:
        gw.popen.wait(15)
    again = s.restart(gw)
    for t in threads:
        t.join(45)
    assert not errors, errors
    assert sorted(got) == sorted(ids)
    assert all(
        job["status"] == "succeeded" and job["result"]["tokens"] == 2 for job in got.values()
    )
    assert again.alive()
    again.popen.kill()  # the next test starts its own gateway on the shared Redis
    again.popen.wait(10)


@LISTENERS
def test_sigterm_answers_every_open_long_poll_503_with_retry_after(
    stack_factory: Callable[..., Stack], admin: bool
) -> None:
    """What a client that does not retry sees: ``503 shutting_down``, ``Retry-After: 1``
    (with admin_port this used to be a plain-text 500 after the 5 s grace, and a
    traceback per request in the log)."""
    s = stack_factory()
    cfg = fault_config(gateway=_gateway_section(admin))
    cfg["models"][MODEL]["autoscaling"] = {"min_replicas": 0}  # accepted with no worker
    gw, url = s.spawn_gateway(s.write_config(cfg))
    ids = [
        HTTP.post(f"{url}/v1/models/{MODEL}/jobs", json={"input": f"job {i}"}).json()["id"]
        for i in range(4)
    ]
    answers: list[httpx.Response | str] = []

    def poll(job_id: str) -> None:
        try:
            answers.append(HTTP.get(f"{url}/v1/jobs/{job_id}", params={"wait": 60}, timeout=30))
        except httpx.HTTPError as e:
            answers.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=poll, args=(j,), daemon=True) for j in ids]
    for t in threads:
        t.start()
    wait_until(
        lambda: longpoll_waiters(_metrics_url(url, cfg)) == len(ids),
        20,
        "every poll to be waiting",
        every_s=0.1,
    )
    gw.signal(signal.SIGTERM)
    for t in threads:
        t.join(30)
    assert len(answers) == len(ids), answers
    for a in answers:
        assert isinstance(a, httpx.Response), a
        assert a.status_code == 503 and a.headers.get("retry-after") == "1", (a, a.text)
        assert a.json()["error"]["type"] == "shutting_down"
    _assert_clean_stop(gw)
