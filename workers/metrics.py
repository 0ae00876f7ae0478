"""Prometheus metrics of one worker process, on its own registry and port."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from sluice.registry import WORKER_STATES

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TOKENS = (32, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768)
SECONDS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
WAIT_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class WorkerMetrics:
    """Every metric a worker exports; labels are model, bucket, status, state (bounded)."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.registry = CollectorRegistry()
        self._batch_metrics(self.registry)
        self._gauges(self.registry)
        self._real = 0
        self._padded = 0

    def _batch_metrics(self, reg: CollectorRegistry) -> None:
        """What each batch adds to: its size, tokens, time, waits and outcomes."""
        mb = ["model", "bucket"]

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, mb, buckets=buckets, registry=reg)

        self.batch_size = hist("sluice_worker_batch_size", "Jobs per batch.", BATCH_SIZES)
        self.padded_tokens = hist(
            "sluice_worker_batch_padded_tokens", "Padded tokens per batch.", TOKENS
        )
        self.inference_seconds = hist(
            "sluice_worker_inference_seconds", "Handler time per batch.", SECONDS
        )
        self.queue_wait_seconds = hist(
            "sluice_worker_queue_wait_seconds", "Enqueue to claim, per job.", WAIT_SECONDS
        )
        self.real_tokens_total = Counter(
            "sluice_worker_real_tokens_total", "Tokens of the inputs themselves.", mb, registry=reg
        )
        self.padded_tokens_total = Counter(
            "sluice_worker_padded_tokens_total",
            "Tokens computed, padding included.",
            mb,
            registry=reg,
        )
        self.jobs_total = Counter(
            "sluice_worker_jobs_total",
            "Jobs ended by this worker.",
            ["model", "status"],
            registry=reg,
        )
        self.oom_total = Counter(
            "sluice_worker_oom_splits_total",
            "Batches split after out-of-memory.",
            ["model"],
            registry=reg,
        )

    def _gauges(self, reg: CollectorRegistry) -> None:
        """The worker's state, rates, budget and start, set as they change."""
        self.state = Gauge(
            "sluice_worker_state",
            "1 for the worker's current state.",
            ["model", "state"],
            registry=reg,
        )
        self.padding_efficiency = Gauge(
            "sluice_worker_padding_efficiency",
            "Real / padded tokens since start.",
            ["model"],
            registry=reg,
        )
        self.service_rate = Gauge(
            "sluice_worker_service_rate",
            "Cost units per busy second (recent batches).",
            ["model"],
            registry=reg,
        )
        self.token_budget = Gauge(
            "sluice_worker_token_budget", "Current claim budget.", ["model"], registry=reg
        )
        self.start_seconds = Gauge(
            "sluice_worker_start_seconds",
            "Seconds this worker's start spent per stage (workers/startpath.py).",
            ["model", "stage"],
            registry=reg,
        )
        self.promote_seconds = Gauge(
            "sluice_worker_promote_seconds",
            "Seconds from the latest promote command to the first claim's reply.",
            ["model"],
            registry=reg,
        )

    def set_state(self, state: str) -> None:
        for s in WORKER_STATES:
            self.state.labels(self.model, s).set(1 if s == state else 0)

    def set_start_path(self, stages: dict[str, float]) -> None:
        for stage, seconds in stages.items():
            self.start_seconds.labels(self.model, stage).set(seconds)

    def observe_batch(self, bucket: str, jobs: int, padded: int, real: int, infer_s: float) -> None:
        m = self.model
        self.batch_size.labels(m, bucket).observe(jobs)
        self.padded_tokens.labels(m, bucket).observe(padded)
        self.padded_tokens_total.labels(m, bucket).inc(padded)
        self.real_tokens_total.labels(m, bucket).inc(real)
        self.inference_seconds.labels(m, bucket).observe(infer_s)
        self._real += real
        self._padded += padded
        if self._padded:
            self.padding_efficiency.labels(m).set(self._real / self._padded)

    @property
    def padding_efficiency_value(self) -> float:
        return self._real / self._padded if self._padded else 0.0

    def observe_waits(self, bucket: str, waits_s: list[float]) -> None:
        h = self.queue_wait_seconds.labels(self.model, bucket)
        for w in waits_s:
            h.observe(max(w, 0.0))

    def count_jobs(self, by_kind: dict[str, int]) -> None:
        names = {"ok": "succeeded", "fail": "failed", "retry": "retried"}
        for kind, n in by_kind.items():
            if n:
                self.jobs_total.labels(self.model, names.get(kind, kind)).inc(n)

    def serve(self, port: int, addr: str = "0.0.0.0") -> tuple[int, Any]:
        """Start the /metrics endpoint; port 0 picks a free one. Returns (port, server)."""
        server, _ = start_http_server(port, addr=addr, registry=self.registry)
        return int(server.server_port), server
