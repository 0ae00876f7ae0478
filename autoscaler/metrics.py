"""The autoscaler's Prometheus metrics (one registry per process; labels are bounded)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from autoscaler.policy import Decision


class AutoscalerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._scaling(self.registry)
        self._warm_pool(self.registry)
        self._upkeep(self.registry)

    def _scaling(self, r: CollectorRegistry) -> None:
        self.desired = Gauge(
            "sluice_autoscaler_desired_replicas",
            "Replicas the policy asked for.",
            ["model"],
            registry=r,
        )
        self.current = Gauge(
            "sluice_autoscaler_current_replicas",
            "Replicas running or starting (not draining).",
            ["model"],
            registry=r,
        )
        self.decisions = Counter(
            "sluice_autoscaler_decisions_total",
            "Scaling decisions by direction and reason.",
            ["model", "direction", "reason"],
            registry=r,
        )

    def _warm_pool(self, r: CollectorRegistry) -> None:
        self.parked = Gauge(
            "sluice_autoscaler_parked_workers",
            "Warm-pool workers parked (standby), as the latest read saw them.",
            ["model"],
            registry=r,
        )
        self.pool_size = Gauge(
            "sluice_autoscaler_warm_pool_size",
            "Parked workers the pool keeps (warm_pool.size: auto: sized this period).",
            ["model"],
            registry=r,
        )
        self.pool_rise = Gauge(
            "sluice_autoscaler_warm_pool_rise_replicas",
            "warm_pool.size: auto: the history's rise within one cold start, at its "
            "percentile (replicas beyond the serving ones).",
            ["model"],
            registry=r,
        )
        self.pool_sizings = Counter(
            "sluice_autoscaler_warm_pool_sizings_total",
            "warm_pool.size: auto: periods by what set the size (history, idle, initial, "
            "or the bound that capped it: max-replicas, room, cost-cap).",
            ["model", "reason"],
            registry=r,
        )

    def _upkeep(self, r: CollectorRegistry) -> None:
        """The loop's own health: config reloads, backend actions, lease reclaims."""
        self.reload_errors = Counter(
            "sluice_autoscaler_config_reload_errors_total",
            "Config reloads rejected (the last good policy stayed).",
            registry=r,
        )
        self.backend_errors = Counter(
            "sluice_autoscaler_backend_errors_total",
            "Backend actions that failed.",
            ["model"],
            registry=r,
        )
        self.reclaimed = Counter(
            "sluice_autoscaler_reclaimed_leases_total",
            "Expired leases the loop requeued or dead-lettered.",
            ["model"],
            registry=r,
        )
        self.reclaim_errors = Counter(
            "sluice_autoscaler_reclaim_errors_total",
            "Reclaims that failed (Redis errors).",
            ["model"],
            registry=r,
        )

    def record(self, model: str, d: Decision, parked: int | None = None) -> None:
        if parked is not None:
            self.parked.labels(model).set(parked)
        self.desired.labels(model).set(d.desired)
        self.current.labels(model).set(d.current)
        self.decisions.labels(model, d.direction, d.reason).inc()
        if d.pool is not None:
            self.pool_size.labels(model).set(d.pool.size)
            self.pool_rise.labels(model).set(d.pool.rise)
            self.pool_sizings.labels(model, d.pool.reason).inc()

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        # All interfaces, as the workers do: Prometheus scrapes it from another pod.
        start_http_server(port, addr=addr, registry=self.registry)
