"""How the local backend divides the machine's CPU cores between CPU workers.

A CPU worker holds the cores its torch threads run on: two workers of two
threads each on two cores serve less than one worker (they fight for the same
cores), so the local backend counts cores like a device's memory and never
starts a worker that would oversubscribe them (docs/adr/0125). A model's worker
holds ``autoscaling.cpu_cores`` cores; unset, its ``params.num_threads``, else the
machine's cores divided by its ``max_replicas`` (at least one). The synthetic
handler only sleeps and holds none. ``sluice up`` prints the division
(:func:`describe`) and the local backend passes each worker its thread count
(``SLUICE_NUM_THREADS``).
"""

from __future__ import annotations

import os

from sluice.config import ModelConfig, SluiceConfig

THREADS_ENV = "SLUICE_NUM_THREADS"
NO_COMPUTE_HANDLERS = frozenset({"synthetic"})


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def total_cores(cfg: SluiceConfig) -> int:
    return cfg.autoscaler.cpu_cores or machine_cores()


def cores_per_worker(model: ModelConfig, total: int) -> int:
    """Cores one CPU worker of ``model`` holds (0: it holds none); never more than
    ``total``, so one worker always fits (a worker asked to run more threads than
    there are cores holds them all)."""
    a = model.autoscaling
    if a.cpu_cores is not None:
        return min(a.cpu_cores, total)
    if model.handler in NO_COMPUTE_HANDLERS:
        return 0
    threads = int(model.params.get("num_threads", 0) or 0)
    if threads > 0:
        return min(threads, total)
    return max(1, total // max(1, a.max_replicas))


def describe(cfg: SluiceConfig) -> list[str]:
    """One line per model: how many cores its CPU workers hold and how many fit."""
    total = total_cores(cfg)
    lines = [f"{total} CPU cores for workers"]
    if cfg.autoscaler.devices:
        lines[0] += " (GPU workers hold none)"
    for name, m in cfg.models.items():
        per = cores_per_worker(m, total)
        if per == 0:
            lines.append(f"{name}: holds no cores, up to {m.autoscaling.max_replicas} workers")
            continue
        fit = total // per
        most = min(m.autoscaling.max_replicas, fit)
        line = f"{name}: {per} core(s) per worker, up to {most} worker(s) on the CPU"
        if fit < m.autoscaling.max_replicas:
            line += f" (max_replicas {m.autoscaling.max_replicas} would oversubscribe them)"
        lines.append(line)
    return lines
