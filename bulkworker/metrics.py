"""The RQ bulk worker's Prometheus metrics (``bulk.metrics_port``, served by
``sluice bulk worker``; counted in the worker process, never in a work horse)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class BulkWorkerMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.slices = Counter(
            "sluice_bulk_slices_total",
            "Coordinator slices this worker ran, by RQ's status after them "
            "(finished, failed, stopped, ...; 'unknown' when it could not be read).",
            ["outcome"],
            registry=r,
        )
        self.slice_seconds = Histogram(
            "sluice_bulk_slice_seconds",
            "One coordinator slice, fork to the work horse's exit.",
            buckets=(0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600),
            registry=r,
        )
        self.rq_queued = Gauge(
            "sluice_bulk_rq_queued",
            "Coordinator slices waiting in RQ's bulk queue (read by the reaper).",
            registry=r,
        )
        self.resumed = Counter(
            "sluice_bulk_resumed_total",
            "Bulk jobs whose lapsed coordinator the reaper resumed.",
            ["model"],
            registry=r,
        )
        self.reaper_failures = Counter(
            "sluice_bulk_reaper_failures_total",
            "Reaper passes that could not reach Redis.",
            registry=r,
        )

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        server, _ = start_http_server(port, addr=addr, registry=self.registry)
        return int(server.server_port)
