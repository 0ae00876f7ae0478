"""Instructions Redis spends per queue-script call, counted by valgrind (docs/benchmarks/cost.md).

``python -m sluicebench.script_instructions [--batch K] [--calls M] [--server PATH]``
(or ``PYTHONPATH=CHECKOUT python sluicebench/script_instructions.py``: it imports
only ``sluice`` and libraries, so it counts another checkout's scripts too): starts
a private ``redis-server`` under ``valgrind --tool=callgrind`` and, per step, dumps
its counters before and after M calls (``callgrind_control -d``). The figure is
user-space instructions, the same on a loaded machine as on a quiet one: what a
timing on a shared 2-vCPU machine cannot resolve (a few percent), this can (about
+-3% from run to run: job ids and hash seeds differ). Syscalls are not counted.

Steps, as ``sluicebench.cost_steps`` has them: a submit call of K one-job
requests (what the gateway's coalescing sends), a claim and a complete of K jobs
(each answered with a 384-float embedding), the gateway's one-command read of K
ended jobs in one pipeline, an empty claim, a one-job submit. Needs ``valgrind``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

import redis

from sluice.config import parse_config
from sluice.jobs import Outcome
from sluice.queue import QueueClient
from sluicebench.cost_steps import MODEL, RESULT, _job


class Counted:
    """A redis-server under callgrind; :meth:`since` gives the instructions since
    the last call (a dump resets the counters)."""

    def __init__(self, server: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="sluice-cg-")
        self.sock = os.path.join(self.dir, "r.sock")
        out = os.path.join(self.dir, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", server]
        cmd += ["--port", "0", "--unixsocket", self.sock, "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.sock):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"redis-server under valgrind did not start ({cmd})")
            time.sleep(0.1)

    def since(self) -> int:
        before = set(glob.glob(os.path.join(self.dir, "cg.out*")))
        dump = ["callgrind_control", "-d", str(self.proc.pid)]
        subprocess.run(dump, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        deadline = time.monotonic() + 30
        while not (new := set(glob.glob(os.path.join(self.dir, "cg.out*"))) - before):
            if time.monotonic() > deadline:
                raise RuntimeError("callgrind wrote no dump")
            time.sleep(0.05)
        path = max(new, key=os.path.getmtime)
        for _ in range(100):  # the dump is written after the file appears
            with open(path) as f:
                for line in f:
                    if line.startswith(("summary:", "totals:")):
                        return int(line.split()[1])
            time.sleep(0.05)
        raise RuntimeError(f"no totals in {path}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def measure(k: int, calls: int, server: str) -> dict[str, dict[str, float]]:
    """Thousands of instructions per call and per job of each step."""
    srv = Counted(server)
    r = redis.Redis(unix_socket_path=srv.sock, decode_responses=True, socket_timeout=120)
    # Under valgrind a step runs ~50x slower: with the default max_priority_wait_s (5 s)
    # the queued jobs would read as overdue, a path the measured service never takes.
    model = {"handler": "synthetic", "cost": {"method": "words"}}
    model["queue"] = {"max_priority_wait_s": 3600}
    cfg = parse_config({"models": {MODEL: model}})
    q = QueueClient(r, dict(cfg.models))
    out: dict[str, dict[str, float]] = {}

    def step(name: str, run: Callable[[], Any], n: int, jobs: int) -> None:
        run()  # scripts loaded, connection warm
        srv.since()
        for _ in range(n):
            run()
        per_call = srv.since() / n / 1000
        out[name] = {"per_call": round(per_call, 1), "per_job": round(per_call / jobs, 1)}

    batches: list[Any] = []
    ended: list[str] = []

    def complete() -> None:
        batch = batches.pop(0)
        q.complete(MODEL, [Outcome.ok(j.id, RESULT) for j in batch.jobs], "w")
        ended.extend(j.id for j in batch.jobs)

    def read() -> None:
        pipe = r.pipeline(transaction=False)
        for jid in ended[:k]:
            for cmd in q.ops.get_plain(jid).commands:
                pipe.execute_command(*cmd)
        del ended[:k]
        pipe.execute()

    try:
        submit = lambda: q.run(q.ops.submit_many(MODEL, [[_job()] for _ in range(k)]))  # noqa: E731
        step(f"submit, {k} one-job requests a call", submit, calls, k)
        claim = lambda: batches.append(q.claim(MODEL, "w", max_batch=k))  # noqa: E731
        step(f"claim, batch {k}", claim, calls, k)
        step(f"complete, batch {k}", complete, calls, k)
        step(f"read of {k} ended jobs, one round trip", read, calls - 1, k)
        while q.claim(MODEL, "w", max_batch=1000).jobs:
            pass
        step("claim, queue empty", lambda: q.claim(MODEL, "w", max_batch=k), calls, 1)
        step("submit, 1 job a call", lambda: q.submit(MODEL, [_job()]), calls, 1)
    finally:
        r.close()
        srv.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16, help="K: requests a call, jobs a batch")
    ap.add_argument("--calls", type=int, default=20, help="calls of each step")
    ap.add_argument("--server", default="redis-server", help="the redis-server binary")
    ap.add_argument("--json", default="", help="also write the figures here")
    a = ap.parse_args()
    got = measure(a.batch, a.calls, a.server)
    print(f"{'step (thousand instructions)':45s} {'a call':>9s} {'a job':>8s}")
    for name, v in got.items():
        print(f"{name:45s} {v['per_call']:9.1f} {v['per_job']:8.1f}")
    if a.json:
        with open(a.json, "w") as f:
            out = {"batch": a.batch, "calls": a.calls, "thousand_instructions": got}
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
