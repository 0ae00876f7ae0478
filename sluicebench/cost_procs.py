"""The cost benchmark's two processes: a gateway that counts, and a stand-in worker.

Run by file path (``python sluicebench/cost_procs.py gateway|worker ...``) with
``PYTHONPATH`` set to the checkout under test, so the same harness measures this
checkout's code and another's (``sluice bench cost --other``): this file imports
only ``sluice`` and libraries, never ``sluicebench``.

Both count Redis round trips where they happen (each ``send_packed_command`` is
one command or one whole pipeline sent, then its replies awaited) and answer
``SIGUSR1`` by writing their counters (and, in the gateway, the profile taken
since ``SIGUSR2``) to the JSON file named by ``$SLUICE_COST_STATS``.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import signal
import sys
from typing import Any

import redis
import redis.asyncio.connection as aconn
import redis.connection as sconn

MODEL = "bench"
STATS_ENV = "SLUICE_COST_STATS"
PROFILE_TOP = 25  # entries kept, by own time

_state: dict[str, Any] = {"seq": 0, "round_trips": 0, "jobs": 0, "batches": 0, "profiler": None}


def _count_round_trips() -> None:
    sync_send = sconn.AbstractConnection.send_packed_command
    async_send = aconn.AbstractConnection.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        _state["round_trips"] += 1
        sync_send(self, command, check_health)

    async def acounted(self: Any, command: Any, check_health: bool = True) -> None:
        _state["round_trips"] += 1
        await async_send(self, command, check_health)

    sconn.AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
    aconn.AbstractConnection.send_packed_command = acounted  # type: ignore[method-assign]


def profile_summary(prof: cProfile.Profile, top: int = PROFILE_TOP) -> dict[str, Any]:
    """The entries with the most own time, each with its share of all profiled time."""
    st = pstats.Stats(prof)
    raw: dict[Any, Any] = st.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values()) or 1e-12
    rows = []
    for (path, line, func), (_cc, calls, tt, ct, _callers) in raw.items():
        where = f"{os.sep.join(path.split(os.sep)[-2:])}:{line}({func})"
        rows.append({"where": where, "calls": calls, "own_s": tt, "cum_s": ct})
    rows.sort(key=lambda r: -r["own_s"])
    for r in rows:
        r["own_share"] = round(r["own_s"] / total, 4)
        r["own_s"], r["cum_s"] = round(r["own_s"], 4), round(r["cum_s"], 4)
    return {"total_s": round(total, 4), "top": rows[:top]}


def _dump(*_: Any, ready: bool = False) -> None:
    """Write the counters (``seq`` 0: the signal handlers are installed, ready)."""
    out: dict[str, Any] = {k: _state[k] for k in ("round_trips", "jobs", "batches")}
    prof = _state["profiler"]
    if prof is not None:
        prof.disable()
        out["profile"] = profile_summary(prof)
        _state["profiler"] = None
    if not ready:
        _state["seq"] += 1
    out["seq"] = _state["seq"]
    path = os.environ[STATS_ENV]
    with open(path + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(path + ".tmp", path)


def _start_profile(*_: Any) -> None:
    prof = cProfile.Profile()
    _state["profiler"] = prof
    prof.enable()


def gateway(args: list[str]) -> None:
    """``sluice gateway ARGS`` in this process, counted (and profiled on request)."""
    _count_round_trips()
    signal.signal(signal.SIGUSR1, _dump)
    signal.signal(signal.SIGUSR2, _start_profile)
    _dump(ready=True)
    from sluice.cli import main

    sys.argv = ["sluice", "gateway", *args]
    main()


def worker(url: str, batch: int, dim: int) -> None:
    """Claim up to ``batch`` jobs, answer each with a ``dim``-float embedding, complete."""
    from sluice.config import parse_config
    from sluice.jobs import Outcome
    from sluice.queue import QueueClient

    _count_round_trips()
    signal.signal(signal.SIGUSR1, _dump)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    _dump(ready=True)
    cfg = parse_config({"models": {MODEL: {"handler": "synthetic"}}})
    q = QueueClient(redis.Redis.from_url(url, decode_responses=True), dict(cfg.models))
    result = {"embedding": [round(0.001 * (i % 997) - 0.4, 6) for i in range(dim)]}
    while True:
        got = q.claim(MODEL, "cost-worker", max_batch=batch)
        if not got.jobs:
            q.wait_for_work(MODEL, 1.0)
            continue
        q.complete(MODEL, [Outcome.ok(j.id, result) for j in got.jobs], "cost-worker")
        _state["jobs"] += len(got.jobs)
        _state["batches"] += 1


if __name__ == "__main__":
    if sys.argv[1] == "gateway":
        gateway(sys.argv[2:])
    else:
        worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
