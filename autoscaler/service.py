"""Assemble an autoscaler (policy source, reader, upkeep, decision log, backend,
metrics) for a process: the one place that says which parts the loop is made of.

``sluice autoscaler`` runs it in the foreground; an embedding process (``sluice
up``) can call :func:`build` and :func:`start_thread` to run it beside others.
"""

from __future__ import annotations

import threading
from pathlib import Path

from autoscaler.backends.base import Backend, Control
from autoscaler.decisions import DecisionLog
from autoscaler.loop import Autoscaler
from autoscaler.metrics import AutoscalerMetrics
from autoscaler.observe import Observer
from autoscaler.reload import PolicySource
from autoscaler.upkeep import Upkeep
from sluice import registry
from sluice.config import SluiceConfig
from sluice.errors import ConfigError
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.queue.scripts import Call

BACKENDS = ("local", "kubernetes", "dry-run")


def redis_control(client: QueueClient) -> Control:
    """Control commands (promote, park) through the worker's control list."""

    def send(model: str, worker_id: str, command: str) -> None:
        client.run(Call(lambda r: r, commands=registry.send_control(model, worker_id, command)))

    return send


def make_backend(
    name: str, cfg: SluiceConfig, config_path: Path, url: str, control: Control | None = None
) -> Backend:
    if name == "dry-run":
        from autoscaler.backends.base import DryRunBackend

        return DryRunBackend()
    if name == "kubernetes":
        from autoscaler.backends.kubernetes import KubernetesBackend

        return KubernetesBackend(cfg, control=control)
    if name == "local":
        from autoscaler.backends.local import LocalBackend

        return LocalBackend(cfg, config_path, url, control=control)
    raise ConfigError(f"backend {name!r}: use one of {', '.join(BACKENDS)}")


def build(
    cfg: SluiceConfig,
    config_path: Path,
    redis_url: str,
    backend: str | None = None,
    metrics_port: int | None = None,
) -> Autoscaler:
    """The loop for every model of ``cfg``; serves /metrics if a port is set."""
    metrics = AutoscalerMetrics()
    port = cfg.autoscaler.metrics_port if metrics_port is None else metrics_port
    if port:
        metrics.serve(port)
    source = PolicySource(config_path, cfg, on_error=lambda _msg: metrics.reload_errors.inc())
    client = QueueClient(connect(redis_url), dict(cfg.models))
    control = redis_control(client)
    act = make_backend(backend or cfg.autoscaler.backend, cfg, config_path, redis_url, control)
    return Autoscaler(
        source,
        Observer(client, dict(cfg.models)),
        act,
        metrics,
        upkeep=Upkeep(client, metrics),
        decisions=DecisionLog(client.redis),
    )


def start_thread(loop: Autoscaler) -> tuple[threading.Thread, threading.Event]:
    """Run the loop in a daemon thread; set the event to stop it (it drains local workers)."""
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), name="sluice-autoscaler", daemon=True)
    thread.start()
    return thread, stop
