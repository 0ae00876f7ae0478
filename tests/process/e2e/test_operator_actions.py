"""Dead letters and purges end to end (docs/adr/0153): ``sluice up`` with real
processes, the ``sluice admin`` CLI and the REST API. One stack, one test: a job
dead-letters, is listed and redriven by the CLI, and its id's long-poll ends
succeeded; queued jobs are purged, and a long-poll and an SSE stream waiting on
them end cancelled; the audit trail names the admin key."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from sluice.apikeys import hash_key
from sluice.cli import app
from tests.kit.http import HTTP
from tests.kit.upstack import Up, launch, shut_down
from tests.waits import wait_until

pytestmark = [pytest.mark.system]
ADMIN_KEY = "sk_ops-0123456789abcdef"
M = "switched"


def config(flags: Path) -> dict[str, Any]:
    return {
        "models": {
            M: {
                "handler": "tests.kit.fault_handlers:SwitchedHandler",
                "params": {
                    "base_ms": 1,
                    "poison_flag": str(flags / "poison"),
                    "hold_flag": str(flags / "hold"),
                },
                "buckets": [32],
                "cost": {"method": "words"},
                "batching": {"max_batch": 1, "max_attempts": 1, "lease_s": 30},
                "autoscaling": {"min_replicas": 1, "max_replicas": 1, "cold_start_s": 1},
            }
        },
        "worker": {"heartbeat_s": 0.3, "overlap": False},
        "bulk": {"rq_workers": 0},  # no bulk job here: one process fewer to start
        "auth": {"keys": [{"name": "ops", "hash": hash_key(ADMIN_KEY), "admin": True}]},
    }


def admin(up: Up, *args: str) -> Any:
    """``sluice admin <args> --json-out`` against the stack (the command line's own
    app, in this process: a child per verb would add seconds of imports); its JSON."""
    env = {"SLUICE_URL": up.gateway, "SLUICE_ADMIN_KEY": ADMIN_KEY}
    done = CliRunner().invoke(app, ["admin", *args, "--json-out"], env=env)
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def submit(http: httpx.Client, text: str) -> str:
    resp = http.post(f"/v1/models/{M}/jobs", json={"input": text})
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def long_poll(http: httpx.Client, job: str) -> str:
    return str(http.get(f"/v1/jobs/{job}", params={"wait": 30}, timeout=40).json()["status"])


def sse_end(up: Up, job: str) -> str:
    """The status of the job's last SSE ``status`` event, once the stream ends."""
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with HTTP.stream("GET", f"{up.gateway}/v1/jobs/{job}/events", headers=headers, timeout=40) as r:
        text = r.read().decode()
    statuses = [json.loads(ln[5:])["status"] for ln in text.splitlines() if ln.startswith("data:")]
    return statuses[-1]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Any:
    flags = tmp_path_factory.mktemp("flags")
    stack = launch(config(flags), tmp_path_factory.mktemp("up"))
    yield stack, flags
    shut_down(stack)


def test_redrive_ends_the_same_id_succeeded_and_purge_ends_waiters_cancelled(up: Any) -> None:
    stack, flags = up
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=stack.gateway, headers=headers, timeout=30) as http:
        (flags / "poison").touch()
        bad = submit(http, "poison pill")
        assert long_poll(http, bad) == "failed"
        listed = admin(stack, "dead-letters", "list", M)
        (item,) = listed["items"]
        assert item["id"] == bad and item["error"]["message"] == "poison input"
        assert item["last_worker"] and item["attempts"] == 1
        (flags / "poison").unlink()  # the cause is fixed: redrive by id
        done = admin(stack, "dead-letters", "redrive", M, "--id", bad, "--yes")
        assert (done["action"], done["count"]) == ("dead_letters.redrive", 1)
        assert long_poll(http, bad) == "succeeded"  # the same id, now with a result

        # The one worker is held by a job, so what follows stays queued.
        (flags / "hold").touch()
        held = submit(http, "hold on")
        wait_until(lambda: http.get(f"/v1/jobs/{held}").json()["status"] == "running")
        polled, streamed = submit(http, "one"), submit(http, "two")
        with ThreadPoolExecutor(2) as pool:
            poll_end = pool.submit(long_poll, http, polled)
            sse = pool.submit(sse_end, stack, streamed)
            wait_until(
                lambda: "sluice_gateway_longpoll_waiters 1.0" in http.get("/metrics").text,
                what="the long-poll waits",
            )
            purged = admin(stack, "purge", M, "--yes")
            assert purged["count"] == 2
            assert poll_end.result(timeout=30) == "cancelled"
            assert sse.result(timeout=30) == "cancelled"
        (flags / "hold").unlink()
        assert long_poll(http, held) == "succeeded"  # a running job is not purged

    trail = admin(stack, "audit", "--model", M)
    assert [(e["actor"], e["action"], e["count"]) for e in trail] == [
        ("ops", "queue.purge", 2),
        ("ops", "dead_letters.redrive", 1),
    ]
