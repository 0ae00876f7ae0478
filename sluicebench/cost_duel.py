"""Two checkouts' gateways under load at the same time: gateway CPU per job, each round.

``sluice bench cost --other`` runs the checkouts one after the other (ABBA), so a
load that other processes put on a shared machine between passes moves one
checkout's figures and not the other's: passes of one checkout differ by 10-40%
here, more than a few-percent change. This runs the two stacks side by side (a
private redis-server, gateway and stand-in worker each, as ``sluice bench cost``
starts them), drives both with the same closed loop at once, and compares their
gateways' CPU per job round by round: whatever the machine does falls on both.

    python sluicebench/cost_duel.py A B [--route predict] [--rounds 8] [--seconds 4]
        [--concurrency 32] [--route-b embeddings] [--json FILE]

With ``--route-b`` the B stack is driven on another route: one checkout (A = B)
compares two routes under the same load (``/v1/embeddings`` against predict).

Prints each round's CPU per job (user + system, psutil) and B over A; then the
geometric mean of the rounds' ratios. Run it twice with A and B swapped: the two
stacks share two cores with the load generator, and a position can be favoured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil

if __package__ in (None, ""):  # run by path: this checkout's packages first
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sluice.local.redis_server import RedisServer, start_redis  # noqa: E402
from sluicebench import cost_bench as cb  # noqa: E402

Stack = tuple[RedisServer, cb.Proc, cb.Proc, int]


def _start(checkout: Path) -> Stack:
    """One checkout's Redis, gateway and worker; what started is stopped if a later
    step fails (nothing is left running on the shared machine)."""
    server = start_redis()
    started: list[Any] = [server]
    try:
        tmp = Path(tempfile.mkdtemp(prefix="sluice-duel-"))
        gw, port = cb._start_gateway(checkout, server.url, tmp)
        started.append(gw)
        wk = cb._spawn(checkout, ["worker", server.url, "32", str(cb.DIM)], tmp / "w.json")
        started.append(wk)
        wk.ready()
    except BaseException:
        for proc in reversed(started):
            proc.stop()
        raise
    return server, gw, wk, port


async def _both(stacks: list[Stack], routes: list[str], seconds: float, clients: int) -> list[Any]:
    drives = (cb._drive(s[3], r, seconds, clients) for s, r in zip(stacks, routes, strict=True))
    return list(await asyncio.gather(*drives))


def duel(
    a: Path,
    b: Path,
    route: str,
    rounds: int,
    seconds: float,
    clients: int,
    route_b: str | None = None,
) -> dict[str, Any]:
    """Per round: each gateway's CPU us per job and B over A; then their summary.
    ``route_b``: B's route when it is not A's (one checkout's two routes compared)."""
    routes = [route, route_b or route]
    stacks: list[Stack] = []
    try:
        for checkout in (a, b):
            stacks.append(_start(checkout))  # one whose partner fails to start is stopped
        asyncio.run(_both(stacks, routes, 1.0, clients))  # warm-up
        procs = [psutil.Process(s[1].proc.pid) for s in stacks]
        out: list[dict[str, Any]] = []
        for i in range(rounds):
            before = [p.cpu_times() for p in procs]
            counts = asyncio.run(_both(stacks, routes, seconds, clients))
            after = [p.cpu_times() for p in procs]
            us = [
                1e6 * (y.user + y.system - x.user - x.system) / max(c["jobs"], 1)
                for x, y, c in zip(before, after, counts, strict=True)
            ]
            ratio = us[1] / us[0]
            jobs = [c["jobs"] for c in counts]
            out.append({"a_us": round(us[0], 1), "b_us": round(us[1], 1), "jobs": jobs})
            out[-1]["b_over_a"] = round(ratio, 4)
            print(f"round {i}: A {us[0]:.0f} us/job, B {us[1]:.0f} us/job, B/A {ratio:.3f}")
    finally:
        for server, gw, wk, _ in stacks:
            wk.stop()
            gw.stop()
            server.stop()
    ratios = [r["b_over_a"] for r in out]
    summary = {
        "a": str(a),
        "b": str(b),
        "routes": routes,
        "rounds": out,
        "b_over_a_geomean": round(statistics.geometric_mean(ratios), 4),
        "a_us_mean": round(statistics.fmean(r["a_us"] for r in out), 1),
        "b_us_mean": round(statistics.fmean(r["b_us"] for r in out), 1),
    }
    print(f"B/A geometric mean {summary['b_over_a_geomean']:.3f} over {rounds} rounds")
    return summary


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--route", default="predict", choices=cb.ROUTES)
    p.add_argument("--route-b", default=None, choices=cb.ROUTES, help="B's, when not A's")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    data = duel(
        args.a, args.b, args.route, args.rounds, args.seconds, args.concurrency, args.route_b
    )
    if args.json is not None:
        args.json.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
