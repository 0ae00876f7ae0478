"""The sections of the other processes: the worker, the autoscaler (with the
devices it may place workers on) and the bulk jobs' RQ coordinators."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from sluice.config.base import StrictModel


class WorkerConfig(StrictModel):
    heartbeat_s: float = Field(2.0, gt=0)
    heartbeat_ttl_s: float = Field(10.0, gt=0)
    quarantine_after_failures: int = Field(5, gt=0)
    quarantine_grace_s: float = Field(30.0, ge=0)
    overlap: bool = True
    metrics_port: int = Field(0, ge=0, lt=65536)


class DeviceConfig(StrictModel):
    """A device the local autoscaler backend may place workers on."""

    name: str  # what the worker gets in CUDA_VISIBLE_DEVICES ("0", "1", ...)
    memory_gb: float = Field(gt=0)


class AutoscalerConfig(StrictModel):
    """The autoscaler process (per-model policy lives in each model's autoscaling block)."""

    backend: Literal["local", "kubernetes", "dry-run"] = "local"
    devices: list[DeviceConfig] = Field(default_factory=list)  # empty: CPU, no memory budget
    # Local backend: cores CPU workers may hold in all (None: the cores this
    # process may run on). A CPU worker that would oversubscribe them is not started.
    cpu_cores: int | None = Field(None, gt=0)
    namespace: str = "default"
    restart_backoff_s: float = Field(1.0, gt=0)
    restart_backoff_max_s: float = Field(60.0, gt=0)
    drain_timeout_s: float = Field(300.0, gt=0)
    metrics_port: int = Field(0, ge=0, lt=65536)

    @field_validator("devices")
    @classmethod
    def _devices(cls, v: list[DeviceConfig]) -> list[DeviceConfig]:
        names = [d.name for d in v]
        if len(set(names)) != len(names):
            raise ValueError(f"device names must be unique, got {names}")
        return v


class BulkConfig(StrictModel):
    """Bulk jobs: JSONL files run by RQ coordinators at the lowest priority."""

    rq_queue: str = Field("sluice-bulk", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    max_file_bytes: int = Field(64 * 1024 * 1024, gt=0)
    max_lines: int = Field(1_000_000, gt=0)
    # Input, output and state are kept this long after a bulk job ends.
    ttl_s: int = Field(7 * 86400, gt=0)
    # One RQ job runs a coordinator for at most this long, then requeues itself:
    # RQ workers take turns between bulk jobs, and RQ's job timeout stays meaningful.
    slice_s: float = Field(60.0, gt=0)
    poll_s: float = Field(0.1, gt=0, le=10)
    # A coordinator renews its lease every poll; one silent this long is presumed
    # dead and its bulk job is resumed from its checkpoint by the reaper.
    lease_s: float = Field(15.0, gt=0)
    # Lines parsed, estimated and submitted per round trip.
    feed_chunk: int = Field(256, gt=0, le=10_000)
    # RQ worker processes `sluice up` starts (each coordinates one bulk job at a time).
    rq_workers: int = Field(1, ge=0, le=64)
    # Prometheus port of a `sluice bulk worker` (all interfaces); 0 serves none.
    # `sluice up` gives each of its RQ workers a free one and names it in its banner.
    metrics_port: int = Field(0, ge=0, lt=65536)
    # Where RQ keeps its queues, when not on Sluice's Redis: RQ needs one server (or a
    # Sentinel service), so a deployment on Redis Cluster points this elsewhere.
    redis_url: str | None = None

    @model_validator(mode="after")
    def _lease(self) -> BulkConfig:
        if self.lease_s <= 2 * self.poll_s:
            raise ValueError(f"lease_s ({self.lease_s}) must be > 2 x poll_s ({self.poll_s})")
        return self
