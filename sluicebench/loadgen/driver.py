"""The load generator's I/O shell: asyncio HTTP (sluicebench.loadgen.http) against a gateway.

Each job is ``POST /v1/models/{model}/jobs`` then ``GET /v1/jobs/{id}?wait=S``
until it ends, exactly what a client does. Open loop sends at the planned
times whatever the gateway's answers (so queueing shows up as latency, not as
a lower send rate); closed loop keeps C jobs outstanding. The driver records
how late it sent each open-loop job, so a load generator that cannot keep up
says so instead of silently offering less load.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import random
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from sluice.client import TERMINAL
from sluice.errors import ConfigError
from sluicebench.loadgen.http import ENGINES, Engine, EngineError, EngineTimeout, make_engines
from sluicebench.loadgen.stats import Outcome, dist, summarize
from sluicebench.loadgen.workload import (
    MIXED,
    Arrival,
    LengthBand,
    Workload,
    poisson_arrivals,
    text_of,
)


@dataclass(frozen=True)
class LoadSpec:
    """One run: exactly one of rate, concurrency or trace; a duration and/or a job count."""

    url: str
    model: str
    rate: float | None = None
    concurrency: int | None = None
    trace: list[Arrival] | None = None
    duration_s: float | None = None
    jobs: int | None = None
    warmup_s: float = 0.0  # jobs sent earlier are left out of the figures
    bands: tuple[LengthBand, ...] = MIXED
    seed: int = 1
    wait_s: float = 30.0  # one long-poll's ?wait=
    job_timeout_s: float = 120.0
    submit_only: bool = False  # POST only: the gateway's own submit capacity
    engine: str = "auto"  # sluicebench.loadgen.http: lean for http://, httpx otherwise
    max_in_flight: int = 4096  # open loop: jobs beyond this count as "overflow" errors
    # This share of jobs carries a unique Idempotency-Key header (the key family
    # a soak must see expire too); the draw is seeded, like the workload.
    idempotency_fraction: float = 0.0
    progress: bool = True
    label: str = field(default="", compare=False)

    def check(self) -> None:
        modes = sum(x is not None for x in (self.rate, self.concurrency, self.trace))
        if modes != 1:
            raise ConfigError("give exactly one of --rate, --concurrency or --trace")
        if self.trace is None and self.duration_s is None and self.jobs is None:
            raise ConfigError("give --duration-s and/or --jobs")
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.engine not in ENGINES:
            raise ConfigError(f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.duration_s is not None and self.warmup_s >= self.duration_s:
            raise ConfigError(f"warm-up ({self.warmup_s}s) must be shorter than the run")
        if not 0.0 <= self.idempotency_fraction <= 1.0:
            raise ConfigError(
                f"idempotency fraction must be in [0, 1], got {self.idempotency_fraction}"
            )

    @property
    def mode(self) -> str:
        if self.concurrency is not None:
            return "closed"
        return "trace" if self.trace is not None else "poisson"


class Driver:
    """Runs one :class:`LoadSpec` and returns its summary (``run``)."""

    def __init__(self, spec: LoadSpec, transport: httpx.AsyncBaseTransport | None = None) -> None:
        spec.check()
        self.spec = spec
        self.transport = transport
        self.workload = Workload(spec.bands, spec.seed)
        self.outcomes: list[Outcome] = []
        self.lags_ms: list[float] = []
        self.sent = 0
        self.t0 = 0.0
        self.engines: list[Engine] = []
        self._idem_rng = random.Random(spec.seed)
        self._idem_seq = 0
        self._run_token = f"{time.time_ns():x}"  # keys of two runs on one Redis never meet

    async def run(self) -> dict[str, Any]:
        s = self.spec
        in_flight = s.concurrency or min(s.max_in_flight, 512)
        cpu0 = _cpu_s()
        self.engines = make_engines(s.engine, s.url, s.wait_s + 15.0, in_flight, self.transport)
        self.t0 = time.monotonic()
        ticker = asyncio.create_task(self._progress()) if s.progress else None
        try:
            end = await (self._closed() if s.concurrency else self._open())
        finally:
            if ticker:
                ticker.cancel()
            for engine in self.engines:
                await engine.aclose()
        window = (self.t0 + s.warmup_s, end)
        bands = [(b.lo, b.hi) for b in s.bands] if s.trace is None else []
        out = summarize(self.outcomes, window_s=window, sent_total=self.sent, bands=bands)
        out["send_lag_ms"] = dist(self.lags_ms)
        out["elapsed_s"] = round(time.monotonic() - self.t0, 3)
        out["client_cpu_s"] = round(_cpu_s() - cpu0, 3)
        out["spec"] = _describe(s)
        return out

    async def _closed(self) -> float:
        s = self.spec
        stop_at = self.t0 + s.duration_s if s.duration_s is not None else math.inf

        async def loop(http: Engine) -> None:
            while time.monotonic() < stop_at and (s.jobs is None or self.sent < s.jobs):
                self.sent += 1
                self.outcomes.append(await self.job(http, self.workload.next_input()))

        slots = range(s.concurrency or 1)
        await asyncio.gather(*(loop(self.engines[i % len(self.engines)]) for i in slots))
        return min(stop_at, max((o.done_s for o in self.outcomes), default=self.t0))

    def _plan(self) -> Iterator[tuple[float, Callable[[], str]]]:
        s = self.spec
        if s.trace is not None:
            rng = random.Random(s.seed)
            arrivals = [a for a in s.trace if s.duration_s is None or a.at_s < s.duration_s]
            for a in arrivals[: s.jobs]:
                yield a.at_s, functools.partial(text_of, a.words, rng)
            return
        assert s.rate is not None
        times = poisson_arrivals(
            s.rate, random.Random(s.seed), duration_s=s.duration_s, max_jobs=s.jobs
        )
        for at in times:
            yield at, self.workload.next_input

    async def _open(self) -> float:
        tasks: set[asyncio.Task[None]] = set()
        last_at = 0.0
        for at, make_input in self._plan():
            text = make_input()
            delay = self.t0 + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            self.lags_ms.append(max(0.0, -delay) * 1000.0)
            last_at = at
            self.sent += 1
            if len(tasks) >= self.spec.max_in_flight:
                now = time.monotonic()
                self.outcomes.append(Outcome(now, now, "error", error="overflow"))
                continue
            http = self.engines[self.sent % len(self.engines)]
            task = asyncio.create_task(self._record(http, text))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
        end = self.t0 + (self.spec.duration_s if self.spec.duration_s is not None else last_at)
        return max(end, self.t0 + self.spec.warmup_s + 1e-3)

    async def _record(self, http: Engine, text: str) -> None:
        self.outcomes.append(await self.job(http, text))

    async def job(self, http: Engine, text: str) -> Outcome:
        """Submit one input and long-poll it to the end; never raises."""
        outcome = await self._job(http, text)
        return dataclasses.replace(outcome, words=len(text.split()))

    def _headers(self) -> dict[str, str] | None:
        """An Idempotency-Key for this share of jobs, unique to this run and job."""
        fraction = self.spec.idempotency_fraction
        if fraction <= 0 or self._idem_rng.random() >= fraction:
            return None
        self._idem_seq += 1
        return {"Idempotency-Key": f"lg-{self._run_token}-{self._idem_seq}"}

    async def _job(self, http: Engine, text: str) -> Outcome:
        s = self.spec
        sent = time.monotonic()
        try:
            status, accepted = await http.call(
                "POST", f"/v1/models/{s.model}/jobs", {"input": text}, headers=self._headers()
            )
        except EngineTimeout:
            return Outcome(sent, time.monotonic(), "error", error="timeout")
        except EngineError:
            return Outcome(sent, time.monotonic(), "error", error="transport")
        submit_ms = (time.monotonic() - sent) * 1000.0
        if status != 202 or not isinstance(accepted, dict):
            return Outcome(sent, time.monotonic(), "error", status, submit_ms=submit_ms)
        if s.submit_only:
            return Outcome(
                sent,
                time.monotonic(),
                "submitted",
                bucket=accepted.get("bucket"),
                submit_ms=submit_ms,
            )
        return await self._wait(http, accepted["id"], sent, submit_ms)

    async def _wait(self, http: Engine, job_id: str, sent: float, submit_ms: float) -> Outcome:
        deadline = sent + self.spec.job_timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                now = time.monotonic()
                return Outcome(sent, now, "error", error="timeout", submit_ms=submit_ms)
            wait = {"wait": f"{min(self.spec.wait_s, left):.3f}"}
            try:
                status, view = await http.call("GET", f"/v1/jobs/{job_id}", params=wait)
            except (EngineTimeout, EngineError) as e:
                kind = "timeout" if isinstance(e, EngineTimeout) else "transport"
                return Outcome(sent, time.monotonic(), "error", error=kind, submit_ms=submit_ms)
            if status != 200 or not isinstance(view, dict):
                return Outcome(sent, time.monotonic(), "error", status, submit_ms=submit_ms)
            if view["status"] in TERMINAL:
                return _finished(view, sent, time.monotonic(), submit_ms)

    async def _progress(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        s = self.spec
        total = s.jobs or (len(s.trace) if s.trace is not None else None)
        by_time = total is None and s.duration_s is not None
        columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
        with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("", total=s.duration_s if by_time else total)
            while True:
                done = len(self.outcomes)
                errors = sum(1 for o in self.outcomes if o.status == "error")
                elapsed = time.monotonic() - self.t0
                desc = f"{s.label or s.mode}: sent {self.sent} done {done} errors {errors}"
                bar.update(task, completed=elapsed if by_time else done, description=desc)
                await asyncio.sleep(0.25)


def _finished(view: dict[str, Any], sent: float, done: float, submit_ms: float) -> Outcome:
    t = view.get("timings") or {}
    server_ms = None
    if t.get("finished_at") is not None and t.get("queued_at") is not None:
        server_ms = (t["finished_at"] - t["queued_at"]) * 1000.0
    return Outcome(
        sent,
        done,
        view["status"],
        bucket=view.get("bucket"),
        queue_wait_ms=t.get("queue_wait_ms"),
        run_ms=t.get("run_ms"),
        server_ms=server_ms,
        submit_ms=submit_ms,
    )


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _describe(s: LoadSpec) -> dict[str, Any]:
    return {
        "url": s.url,
        "model": s.model,
        "mode": s.mode,
        "rate": s.rate,
        "concurrency": s.concurrency,
        "trace_jobs": len(s.trace) if s.trace else None,
        "duration_s": s.duration_s,
        "jobs": s.jobs,
        "warmup_s": s.warmup_s,
        "mix": [[b.lo, b.hi, b.weight] for b in s.bands],
        "seed": s.seed,
        "submit_only": s.submit_only,
        "engine": s.engine,
        "idempotency_fraction": s.idempotency_fraction,
    }


def run_load(spec: LoadSpec) -> dict[str, Any]:
    """Run one load spec on a fresh event loop (uvloop when installed)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(Driver(spec).run())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(Driver(spec).run())
