"""What a soak samples every few seconds: process memory, Redis memory and keys.

``classify`` (pure) sorts key names into the families of :mod:`sluice.keys`;
:class:`Probe` is the I/O shell that reads psutil, Redis (INFO, DBSIZE, one
SCAN pass) and the gateway's /metrics, and returns a :class:`Sample`.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
import psutil
import redis

from sluice import keys

MB = 1024 * 1024
FAMILIES = (
    "job",
    "idempotency",
    "wait_hist",
    "e2e_hist",
    "dead_letter",
    "queue",
    "inflight",
    "wake",
    "stats",
    "worker",
    "workers",
    "control",
    "seq",
    "owners",
    "rate_limit",
    "scale",
    "other",
)


def _prefixes(model: str) -> list[tuple[str, str]]:
    """(family, prefix) for one model; longest-first where one prefix extends another."""
    return [
        ("job", keys.job_prefix(model)),
        ("idempotency", keys.idempotency_prefix(model)),
        ("wait_hist", keys.wait_hist_prefix(model)),
        ("e2e_hist", keys.e2e_hist_prefix(model)),
        ("queue", keys.queue_prefix(model)),
        ("wake", keys.wake_prefix(model)),
        ("worker", keys.worker_prefix(model)),
        ("control", keys.worker_control_key(model, "")),
    ]


def _exact(model: str) -> dict[str, str]:
    return {
        keys.dead_letter_key(model): "dead_letter",
        keys.inflight_key(model): "inflight",
        keys.stats_key(model): "stats",
        keys.seq_key(model): "seq",
        keys.workers_key(model): "workers",
        keys.workers_info_key(model): "workers",
        keys.owner_jobs_key(model): "owners",
        keys.rate_limit_key(model): "rate_limit",
        keys.decisions_key(model): "scale",
        keys.scale_state_key(model): "scale",
    }


def classify(names: Iterable[str], models: Iterable[str]) -> dict[str, int]:
    """Key counts per family (every family present, zero when absent)."""
    exact: dict[str, str] = {}
    prefixes: list[tuple[str, str]] = []
    for m in models:
        exact.update(_exact(m))
        prefixes += _prefixes(m)
    counts: Counter[str] = Counter()
    for name in names:
        family = exact.get(name)
        if family is None:
            family = next((f for f, p in prefixes if name.startswith(p)), "other")
        counts[family] += 1
    return {f: counts.get(f, 0) for f in FAMILIES}


_SERIES = re.compile(r"^sluice_\w+(\{[^}]*\})? ", re.MULTILINE)
_WAITERS = re.compile(r"^sluice_gateway_longpoll_waiters (\S+)$", re.MULTILINE)


def metric_series(text: str) -> tuple[int, float | None]:
    """How many sluice_* series a /metrics page holds, and the long-poll waiters gauge."""
    found = _WAITERS.search(text)
    return len(_SERIES.findall(text)), float(found.group(1)) if found else None


@dataclass(frozen=True)
class Sample:
    t_s: float  # seconds since the soak phase started
    rss_mb: dict[str, float]  # process name ("gateway", "worker-1", "redis") -> RSS
    fds: dict[str, int]
    redis_used_mb: float
    redis_dataset_mb: float
    redis_keys: int  # DBSIZE
    families: dict[str, int]
    dead_letters: int  # LLEN of the dead-letter list(s)
    metric_series: int | None = None  # the gateway's sluice_* series (label sets)
    waiters: float | None = None  # the gateway's long-poll waiters gauge
    window: dict[str, Any] = field(default_factory=dict)  # the load since the last sample

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Probe:
    """Reads one :class:`Sample`; processes are given by name -> pid."""

    def __init__(
        self, redis_url: str, models: list[str], pids: dict[str, int], gateway_url: str = ""
    ) -> None:
        self.redis = redis.Redis.from_url(redis_url, decode_responses=True, socket_timeout=5.0)
        self.models = models
        self.procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.gateway_url = gateway_url.rstrip("/")
        # One client for every sample (httpx.get built a TLS context per call, some
        # 50 ms of CPU); no connection kept, so the gateway's fds are as without it.
        self.http = httpx.Client(timeout=5.0, limits=httpx.Limits(max_keepalive_connections=0))

    def processes(self) -> tuple[dict[str, float], dict[str, int]]:
        rss, fds = {}, {}
        for name, proc in self.procs.items():
            try:
                with proc.oneshot():
                    rss[name] = round(proc.memory_info().rss / MB, 2)
                    fds[name] = proc.num_fds()
            except psutil.Error:
                pass  # gone: the verdict notices a missing process
        return rss, fds

    def key_names(self) -> list[str]:
        return list(self.redis.scan_iter(count=1000))

    def gateway_metrics(self) -> tuple[int | None, float | None]:
        if not self.gateway_url:
            return None, None
        try:
            text = self.http.get(f"{self.gateway_url}/metrics").text
        except httpx.HTTPError:
            return None, None
        return metric_series(text)

    def sample(self, t_s: float, window: dict[str, Any] | None = None) -> Sample:
        rss, fds = self.processes()
        mem = self.redis.info("memory")
        pipe = self.redis.pipeline(transaction=False)
        pipe.dbsize()
        for m in self.models:
            pipe.llen(keys.dead_letter_key(m))
        replies = pipe.execute()
        series, waiters = self.gateway_metrics()
        return Sample(
            t_s=round(t_s, 2),
            rss_mb=rss,
            fds=fds,
            redis_used_mb=round(mem["used_memory"] / MB, 3),
            redis_dataset_mb=round(mem.get("used_memory_dataset", 0) / MB, 3),
            redis_keys=int(replies[0]),
            families=classify(self.key_names(), self.models),
            dead_letters=sum(int(n) for n in replies[1:]),
            metric_series=series,
            waiters=waiters,
            window=window or {},
        )

    def close(self) -> None:
        self.redis.close()
        self.http.close()


def wait_until(check: Any, timeout_s: float, every_s: float = 0.5) -> bool:
    """Poll ``check()`` until true or the timeout; returns the last answer."""
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(every_s)
