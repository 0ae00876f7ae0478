"""Fault-tolerance figures (issue 8, faults), side by side in one run.

sluice bench faults [--submits 1000] [--threads 4] [--json PATH]

1. What durability costs: single-job submits (one script call each, a real
   redis-server) with no AOF, and AOF fsynced ``no``, ``everysec``, ``always``;
   jobs/s and the ratio to no AOF.
2. A Redis outage seen by a client of ``sluice gateway``: how long a submit takes
   to be answered (503) while Redis is paused (SIGSTOP) or gone (SIGKILL), and
   how long after Redis is back the first submit is accepted (202) again.
3. A gateway stopped (SIGTERM) with 50 long-polls open: seconds until it exits.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from sluice.config import parse_config
from sluice.jobs import NewJob
from sluice.local.children import Children
from sluice.local.redis_server import RedisServer, free_port
from sluice.queue import QueueClient
from sluice.queue.client import connect

CONFIG: dict[str, Any] = {
    "models": {
        "m": {
            "handler": "synthetic",
            "cost": {"method": "words"},
            "params": {"base_ms": 20, "per_token_ms": 0},
            # Scales from zero: submits are accepted with no worker (part 3).
            "autoscaling": {"min_replicas": 0},
        }
    },
    "gateway": {"redis_timeout_s": 1.0, "stats_refresh_s": 0.5},
    "worker": {"heartbeat_s": 0.3, "metrics_port": 0},
}


def submit_rate(fsync: str | None, n: int, threads: int) -> float:
    """Jobs/s of ``n`` single-job submits from ``threads`` threads."""
    with tempfile.TemporaryDirectory(prefix="sluice-bench-aof-") as tmp:
        server = RedisServer(data_dir=tmp if fsync else None, appendfsync=fsync or "everysec")
        with server.start():
            models = dict(parse_config(CONFIG).models)
            per = n // threads

            def run() -> None:
                qc = QueueClient(connect(server.url), models)
                for _ in range(per):
                    qc.submit("m", [NewJob("hello world", "32", 2)])

            pool = [threading.Thread(target=run) for _ in range(threads)]
            t0 = time.perf_counter()
            for t in pool:
                t.start()
            for t in pool:
                t.join()
            return per * threads / (time.perf_counter() - t0)


def durability(n: int, threads: int, rounds: int = 5) -> list[dict[str, Any]]:
    """Each round runs every setting back to back; ratios are per round, then medians,
    so drift in this shared machine's load cancels out."""
    names = ("off", "no", "everysec", "always")
    rates: dict[str, list[float]] = {k: [] for k in names}
    for _ in range(rounds):
        for name in names:
            rates[name].append(submit_rate(None if name == "off" else name, n, threads))
    rows: list[dict[str, Any]] = []
    for name in names:
        ratios = [r / off for r, off in zip(rates[name], rates["off"], strict=True)]
        rows.append(
            {
                "aof": name,
                "jobs_per_s": round(statistics.median(rates[name])),
                "ratio_to_off": round(statistics.median(ratios), 3),
            }
        )
    return rows


def _gateway(group: Children, tmp: Path, url: str) -> tuple[subprocess.Popen[bytes], str]:
    path = tmp / "sluice.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    port = free_port()
    args = ["gateway", "-c", str(path), "--redis-url", url, "--port", str(port)]
    child = group.spawn(f"gateway-{port}", args)
    base = f"http://127.0.0.1:{port}"
    group.wait_http(f"{base}/readyz", 30)
    return child.proc, base


def _worker(group: Children, tmp: Path, url: str) -> None:
    args = ["worker", "-c", str(tmp / "sluice.yaml"), "-m", "m", "--redis-url", url]
    group.spawn("worker", [*args, "--metrics-port", "-1", "--log-level", "ERROR"])


def _status(url: str, **kw: Any) -> int:
    try:
        return httpx.request(kw.pop("method", "GET"), url, timeout=10, **kw).status_code
    except httpx.HTTPError:
        return 0


def _until(cond: Any, timeout_s: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if cond():
            return time.monotonic() - t0
        time.sleep(0.02)
    raise TimeoutError(f"not within {timeout_s} s")


def _submit(base: str) -> tuple[int, float]:
    t0 = time.monotonic()
    code = _status(f"{base}/v1/models/m/jobs", method="POST", json={"input": "hello"})
    return code, time.monotonic() - t0


def outage(fault: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sluice-bench-outage-") as tmp_s:
        tmp = Path(tmp_s)
        port = free_port()
        server = RedisServer(port=port).start()
        group = Children(tmp)
        try:
            _, base = _gateway(group, tmp, server.url)
            _worker(group, tmp, server.url)
            _until(lambda: _submit(base)[0] == 202, 30)
            assert server.proc is not None
            if fault == "paused":
                os.kill(server.proc.pid, signal.SIGSTOP)
            else:
                server.proc.kill()
                server.stop()
            answers = [_submit(base) for _ in range(10)]
            if fault == "paused":
                os.kill(server.proc.pid, signal.SIGCONT)
            else:
                server = RedisServer(port=port).start()
            back_s = _until(lambda: _submit(base)[0] == 202, 30)
            secs = sorted(s for _, s in answers)
            return {
                "fault": fault,
                "codes": sorted({c for c, _ in answers}),
                "answer_p50_s": round(statistics.median(secs), 3),
                "answer_max_s": round(secs[-1], 3),
                "first_202_after_back_s": round(back_s, 3),
            }
        finally:
            group.stop(group.all, timeout_s=0.0)  # the figures are taken: no drain
            server.stop()


def sigterm_with_long_polls(n: int = 50) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sluice-bench-stop-") as tmp_s:
        server = RedisServer().start()
        group = Children(Path(tmp_s))
        try:
            gw, base = _gateway(group, Path(tmp_s), server.url)
            # No worker: the jobs stay queued, so each long-poll would wait 30 s.
            parse = httpx.post(
                f"{base}/v1/models/m/jobs/batch", timeout=10, json={"inputs": ["x"] * n}
            )
            ids = [j["id"] for j in parse.json()["jobs"]] if parse.status_code == 202 else []
            codes: list[int] = []
            polls = [
                threading.Thread(
                    target=lambda j=j: codes.append(
                        _status(f"{base}/v1/jobs/{j}", params={"wait": 30})
                    )
                )
                for j in ids
            ]
            for t in polls:
                t.start()
            time.sleep(1.0)
            t0 = time.monotonic()
            gw.send_signal(signal.SIGTERM)
            gw.wait(60)
            stop_s = time.monotonic() - t0
            for t in polls:
                t.join(5)
            return {
                "long_polls": len(ids),
                "exit_s": round(stop_s, 3),
                "answers": {str(c): codes.count(c) for c in sorted(set(codes))},
            }
        finally:
            group.stop(group.all, timeout_s=0.0)
            server.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="sluice bench faults", description=__doc__.splitlines()[0])
    ap.add_argument("--submits", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--json", dest="json_path")
    args = ap.parse_args(argv)
    out: dict[str, Any] = {
        "durability": durability(args.submits, args.threads),
        "outage": [outage("paused"), outage("killed")],
        "sigterm": sigterm_with_long_polls(),
    }
    print(
        f"1. submits/s ({args.submits} single-job submits, {args.threads} threads, "
        "medians of 5 rounds)"
    )
    for row in out["durability"]:
        print(f"   AOF {row['aof']:<9} {row['jobs_per_s']:>7} jobs/s  {row['ratio_to_off']:.2f}x")
    print("2. a client of the gateway while Redis is out (redis_timeout_s 1.0)")
    for row in out["outage"]:
        print(
            f"   {row['fault']:<7} codes {row['codes']}  answered p50 {row['answer_p50_s']} s, "
            f"max {row['answer_max_s']} s; first 202 {row['first_202_after_back_s']} s "
            "after Redis is back"
        )
    st = out["sigterm"]
    print(
        f"3. SIGTERM with {st['long_polls']} long-polls open: exited in {st['exit_s']} s; "
        f"long-polls answered {st['answers']}"
    )
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
