"""The gateway's Prometheus metrics, one registry per app (tests build many apps).

Counters are incremented where events happen; queue and worker gauges are set by
the snapshot refresher, so a scrape never costs a Redis round trip.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from sluice.jobs import QueueStats
from sluice.registry import WorkerInfo, workers_by_state

WAKE_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._submitted: dict[tuple[str, str, str], Counter] = {}
        # Declared in this order, which is the order /metrics lists them in.
        self._request_metrics(self.registry)
        self._snapshot_metrics(self.registry)
        self._waiting_and_bulk_metrics(self.registry)
        self._admin_metrics(self.registry)

    def _request_metrics(self, r: CollectorRegistry) -> None:
        """HTTP requests, and the jobs they submitted or had refused."""
        self.requests = Counter(
            "sluice_http_requests_total",
            "HTTP requests by route template and status",
            ["route", "method", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "sluice_http_request_duration_seconds",
            "HTTP request latency by route template",
            ["route", "method"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.submitted = Counter(
            "sluice_jobs_submitted_total",
            "Jobs accepted into a queue",
            ["model", "bucket", "priority"],
            registry=r,
        )
        self.rejected = Counter(
            "sluice_jobs_rejected_total",
            "Jobs refused by admission control or validation",
            ["model", "reason"],
            registry=r,
        )

    def _snapshot_metrics(self, r: CollectorRegistry) -> None:
        """The queue and worker gauges the snapshot refresher sets."""
        self.queue_depth = Gauge(
            "sluice_queue_depth",
            "Queued jobs per bucket (snapshot)",
            ["model", "bucket"],
            registry=r,
        )
        self.queue_cost = Gauge(
            "sluice_queue_cost",
            "Queued cost per bucket (snapshot)",
            ["model", "bucket"],
            registry=r,
        )
        self.in_flight = Gauge("sluice_jobs_in_flight", "Leased jobs", ["model"], registry=r)
        self.workers = Gauge(
            "sluice_workers", "Live workers by state (snapshot)", ["model", "state"], registry=r
        )
        self.drain_rate = Gauge(
            "sluice_gateway_drain_rate",
            "Cost/s the gateway assumes for Retry-After",
            ["model"],
            registry=r,
        )
        self.paused = Gauge(
            "sluice_model_paused",
            "1 while an operator has the model paused: no worker claims (snapshot)",
            ["model"],
            registry=r,
        )
        self.snapshot_age = Gauge(
            "sluice_gateway_snapshot_age_seconds",
            "Age of the newest queue snapshot",
            registry=r,
        )

    def _waiting_and_bulk_metrics(self, r: CollectorRegistry) -> None:
        """Clients waiting on the gateway (long polls, event streams), and bulk jobs."""
        self.wake = Histogram(
            "sluice_gateway_longpoll_wake_seconds",
            "From a completion notification reaching the gateway to its long-poll answer",
            buckets=WAKE_BUCKETS,
            registry=r,
        )
        self.bulk_submitted = Counter(
            "sluice_bulk_jobs_submitted_total", "Bulk files accepted", ["model"], registry=r
        )
        self.bulk_running = Gauge(
            "sluice_bulk_jobs_running",
            "Bulk jobs whose coordinator reported within a minute (snapshot)",
            ["model"],
            registry=r,
        )
        self.bulk_backlog = Gauge(
            "sluice_bulk_backlog_cost",
            "Unfinished bulk work in cost units, queued and not yet fed (snapshot)",
            ["model"],
            registry=r,
        )
        self.waiters = Gauge(
            "sluice_gateway_longpoll_waiters", "Requests waiting for a job to end", registry=r
        )
        self.event_viewers = Gauge(
            "sluice_gateway_model_event_streams",
            "Open GET /v1/models/{m}/events streams",
            ["model"],
            registry=r,
        )
        self.event_streams_refused = Counter(
            "sluice_gateway_model_event_streams_refused_total",
            "Model event streams refused at gateway.model_events_max_viewers (429)",
            registry=r,
        )

    def _admin_metrics(self, r: CollectorRegistry) -> None:
        """Operator actions (ADR 0151): how many, and how many jobs they acted on."""
        self.admin_actions = Counter(
            "sluice_admin_actions_total",
            "Operator actions taken through the admin API",
            ["model", "action"],
            registry=r,
        )
        self.admin_jobs = Counter(
            "sluice_admin_jobs_total",
            "Jobs operator actions acted on (redriven, purged, retried, ...)",
            ["model", "action"],
            registry=r,
        )

    def count_admin(self, model: str, action: str, jobs: int) -> None:
        """One operator action on ``model`` that acted on ``jobs`` jobs."""
        self.admin_actions.labels(model, action).inc()
        self.admin_jobs.labels(model, action).inc(max(0, jobs))

    def count_submitted(self, model: str, bucket: str, priority: str) -> None:
        key = (model, bucket, priority)
        child = self._submitted.get(key)
        if child is None:
            child = self._submitted[key] = self.submitted.labels(model, bucket, priority)
        child.inc()

    def set_snapshot(self, stats: QueueStats, workers: list[WorkerInfo], drain_rate: float) -> None:
        for b in stats.buckets:
            self.queue_depth.labels(stats.model, b.bucket).set(b.queued)
            self.queue_cost.labels(stats.model, b.bucket).set(b.queued_cost)
        self.in_flight.labels(stats.model).set(stats.in_flight)
        for state, n in workers_by_state(workers).items():
            self.workers.labels(stats.model, state).set(n)
        self.drain_rate.labels(stats.model).set(drain_rate)

    def set_bulk(self, model: str, reports: list[tuple[float, float]]) -> None:
        """The coordinators' live reports, (queued_cost, backlog_cost) each."""
        self.bulk_running.labels(model).set(len(reports))
        self.bulk_backlog.labels(model).set(sum(backlog for _, backlog in reports))

    def render(self) -> bytes:
        return generate_latest(self.registry)
