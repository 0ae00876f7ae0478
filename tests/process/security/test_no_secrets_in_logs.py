"""No secret and no input payload in any output: `sluice up` with real processes.

One `sluice up` (gateway with an admin port, autoscaler, a worker) against a
Redis with a password and API keys from an environment variable. Jobs carry a
marker in their inputs, metadata and idempotency keys; one poison input fails in
the handler with an error quoting it; bad requests carry it too. Afterwards no
captured stdout/stderr and no file under the processes' temp dir may contain the
API keys, the Redis password or the marker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
import yaml

from sluice.apikeys import hash_key
from sluice.local.redis_server import free_port, start_redis

pytestmark = [pytest.mark.system]

API_KEY = "sk_LOGAUDIT-user-key-6b0e2f9a41c7d3"
ADMIN_KEY = "sk_LOGAUDIT-admin-key-0c4d1e8b77aa"
WRONG_KEY = "sk_LOGAUDIT-wrong-key-9f8e7d6c5b4a"
PASSWORD = "LOGAUDIT-redis-pw-51d3"
MARKER = "MARKER-7f3a9c1e-PAYLOAD"
SECRETS = [API_KEY, ADMIN_KEY, WRONG_KEY, PASSWORD, quote(PASSWORD, safe=""), MARKER]


def _config(port: int, admin_port: int) -> dict[str, object]:
    return {
        "models": {
            "m": {
                "handler": "tests.kit.poison_handler:PoisonHandler",
                "params": {"base_ms": 1, "per_token_ms": 0.01},
                "buckets": [32, 128],
                "cost": {"method": "words"},
                "batching": {"max_batch": 8, "max_batch_tokens": 1024, "max_attempts": 1},
                "autoscaling": {"min_replicas": 1, "max_replicas": 1, "period_s": 1},
            }
        },
        "gateway": {"port": port, "admin_port": admin_port},
        "worker": {"heartbeat_s": 0.3, "heartbeat_ttl_s": 3},
        "autoscaler": {"drain_timeout_s": 10},
        "auth": {"keys_env": "SLUICE_TEST_KEYS"},
    }


def _read_until_up(proc: subprocess.Popen[str], lines: list[str], timeout_s: float) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, "sluice up exited before it was up:\n" + "".join(lines)
        lines.append(line)
        if line.startswith("Ctrl-C"):
            return
    raise AssertionError("sluice up was not up in time:\n" + "".join(lines))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    tmp = tmp_path_factory.mktemp("logaudit")
    redis = start_redis(password=PASSWORD)
    port, admin_port = free_port(), free_port()
    cfg = tmp / "sluice.yaml"
    cfg.write_text(yaml.safe_dump(_config(port, admin_port)))
    keys = [
        {"name": "user", "hash": hash_key(API_KEY)},
        {"name": "ops", "hash": hash_key(ADMIN_KEY), "admin": True},
    ]
    env = os.environ | {
        "TMPDIR": str(tmp),
        "SLUICE_TEST_KEYS": yaml.safe_dump(keys),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
    }
    env.pop("SLUICE_API_KEY", None)
    up = subprocess.Popen(
        [sys.executable, "-m", "sluice", "up", "--config", str(cfg), "--redis-url", redis.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[str] = []
    try:
        _read_until_up(up, lines, 90)
        result = _exercise(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}")
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGINT)
        try:
            out, err = up.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
            out, err = up.communicate()
        redis.stop()
    files = {p: p.read_bytes() for p in tmp.rglob("*") if p.is_file() and p != cfg}
    yield {"stdout": "".join(lines) + out, "stderr": err, "files": files, **result}


def _exercise(api: str, admin: str) -> dict[str, object]:
    auth = {"Authorization": f"Bearer {API_KEY}"}
    out: dict[str, object] = {}
    with httpx.Client(base_url=api, timeout=30) as c:
        ids = []
        for i in range(6):
            r = c.post(
                "/v1/models/m/jobs",
                headers={**auth, "Idempotency-Key": f"{MARKER}-{i}"},
                json={"input": f"{MARKER} {i}", "metadata": {"note": MARKER}},
            )
            assert r.status_code == 202, r.text
            ids.append(r.json()["id"])
        batch = c.post(
            "/v1/models/m/jobs/batch",
            headers={"X-API-Key": API_KEY},
            json={"inputs": [f"{MARKER} a", f"{MARKER} b"]},
        )
        ids += [j["id"] for j in batch.json()["jobs"]]
        poison = c.post("/v1/models/m/jobs", headers=auth, json={"input": f"POISON {MARKER}"})
        out["ok"] = [c.get(f"/v1/jobs/{j}?wait=20", headers=auth).json()["status"] for j in ids]
        out["poison"] = c.get(f"/v1/jobs/{poison.json()['id']}?wait=20", headers=auth).json()
        # Refused requests carrying the marker and keys: none of it may be logged either.
        wrong = {"Authorization": f"Bearer {WRONG_KEY}"}
        raw = {**auth, "Content-Type": "application/json"}
        out["refused"] = [
            c.post("/v1/models/m/jobs", headers=wrong, json={"input": MARKER}).status_code,
            c.post("/v1/models/m/jobs", headers=auth, json={"input": MARKER, "x": 1}).status_code,
            c.post("/v1/models/m/jobs", headers=raw, content=f"{{{MARKER}").status_code,
            c.get("/metrics", headers=auth).status_code,
        ]
    with httpx.Client(base_url=admin, timeout=10) as a:
        out["admin_metrics"] = a.get("/metrics", headers={"X-API-Key": ADMIN_KEY}).status_code
        out["admin_v1"] = a.get("/v1/models", headers={"X-API-Key": ADMIN_KEY}).status_code
    return out


def test_the_stack_served_the_jobs_through_keys_and_the_admin_port(run: dict[str, object]) -> None:
    assert run["ok"] == ["succeeded"] * 8
    poison = run["poison"]
    assert isinstance(poison, dict) and poison["status"] == "failed"
    assert MARKER in poison["error"]["message"]  # the owner sees its own input's error
    assert run["refused"] == [401, 422, 422, 404]  # /metrics is on the admin port only
    assert run["admin_metrics"] == 200 and run["admin_v1"] == 404


def test_no_secret_or_payload_in_any_output(run: dict[str, object]) -> None:
    files = run["files"]
    assert isinstance(files, dict) and any(p.suffix == ".log" for p in files)
    streams = {"stdout": str(run["stdout"]), "stderr": str(run["stderr"])}
    assert "***" in streams["stdout"]  # the banner's Redis URL, redacted
    assert "stopped" in streams["stdout"] and "killed" not in streams["stdout"]  # clean exit
    for secret in SECRETS:
        for name, text in streams.items():
            assert secret not in text, f"{secret!r} in {name}"
        for path, data in files.items():
            assert secret.encode() not in data, f"{secret!r} in {path}"
