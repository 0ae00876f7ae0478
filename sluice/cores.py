"""How the local backend divides the machine's CPU cores between CPU workers.

A CPU worker holds the cores its torch threads run on: two workers of two
threads each on two cores serve less than one worker (they fight for the same
cores), so the local backend counts cores like a device's memory and never
starts a worker that would oversubscribe them (docs/adr/0125). A model's worker
holds ``autoscaling.cpu_cores`` cores; unset, its ``params.num_threads`` (a
causal-lm's ``params.threads``, ADR 0144), else the
machine's cores divided by its ``max_replicas`` (at least one). The synthetic
handler only sleeps and holds none. ``sluice up`` prints the division
(:func:`describe`) and the local backend passes each worker its thread count
(``SLUICE_NUM_THREADS``).

The machine's cores are those this process may run on: its CPU affinity, and no
more than its cgroup's CPU quota allows, rounded up. A container limited to 2 of
a host's 16 cores sees all 16 in its affinity; counting those gave each worker
16 / max_replicas threads on 2 cores' worth of time (issue 28).
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

from sluice.config import ModelConfig, SluiceConfig

THREADS_ENV = "SLUICE_NUM_THREADS"
NO_COMPUTE_HANDLERS = frozenset({"synthetic"})
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct")  # where cgroup v1's cpu controller is mounted

log = logging.getLogger("sluice.cores")


def machine_cores(root: Path = CGROUP_ROOT, own: Path = PROC_SELF_CGROUP) -> int:
    """The cores this process may run on: its CPU affinity (not the host's count),
    and no more than its cgroup CPU quota rounded up; at least one."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit(root, own)
    if limit is not None:
        cores = min(cores, math.ceil(limit))
    return max(1, cores)


def cgroup_cpu_limit(root: Path = CGROUP_ROOT, own: Path = PROC_SELF_CGROUP) -> float | None:
    """Cores' worth of CPU time the cgroup quota allows (quota / period), the
    smallest along the process's cgroup and its ancestors; None when there is no
    quota, no cgroup, or a file that does not parse (logged)."""
    v2 = (root / "cgroup.controllers").exists()
    limits = []
    mount = root if v2 else next((root / m for m in V1_CPU_MOUNTS if (root / m).is_dir()), root)
    for d in _cgroup_dirs(mount, _own_path(own, v2)):
        limit = _v2_limit(d) if v2 else _v1_limit(d)
        if limit is not None:
            limits.append(limit)
    return min(limits, default=None)


def _own_path(own: Path, v2: bool) -> str:
    """The process's cgroup path from /proc/self/cgroup (v2: "0::/path"; v1: the
    line whose controllers include cpu); "/" when unknown."""
    try:
        lines = own.read_text().splitlines()
    except OSError:
        return "/"
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if (v2 and parts[0] == "0" and parts[1] == "") or (not v2 and "cpu" in parts[1].split(",")):
            return parts[2]
    return "/"


def _cgroup_dirs(mount: Path, path: str) -> list[Path]:
    """The process's cgroup directory and its ancestors under ``mount``, that exist.
    With a cgroup namespace (or a v1 container's own mount) the path does not exist
    under the mount and the mount's root is the process's own cgroup."""
    rel = Path(path.strip().lstrip("/"))
    if ".." in rel.parts:  # outside our cgroup namespace: only the mount's root is ours
        rel = Path()
    dirs = [mount / rel, *[mount / p for p in rel.parents]]
    return [d for d in dirs if d.is_dir()]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # missing: this cgroup sets no quota
        return None


def _v2_limit(d: Path) -> float | None:
    text = _read(d / "cpu.max")  # "<quota|max> <period>"
    if text is None:
        return None
    quota, _, period = text.partition(" ")
    return _ratio(d / "cpu.max", quota, period)


def _v1_limit(d: Path) -> float | None:
    quota = _read(d / "cpu.cfs_quota_us")  # -1: no limit
    if quota is None:
        return None
    return _ratio(d / "cpu.cfs_quota_us", quota, _read(d / "cpu.cfs_period_us") or "")


def _ratio(path: Path, quota: str, period: str) -> float | None:
    """quota / period; None for no limit ("max", -1) or a malformed file (logged:
    a quota we cannot read must not stop the autoscaler, it falls back to affinity)."""
    if quota in ("max", "-1"):
        return None
    try:
        q, p = int(quota), int(period)
    except ValueError:
        q = p = 0
    if q <= 0 or p <= 0:
        log.warning("cores: ignoring %s (%r, %r): no CPU quota assumed", path, quota, period)
        return None
    return q / p


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
    # num_threads: the torch handlers'; threads: the causal-lm handler's (ADR 0144).
    threads = int(model.params.get("num_threads", 0) or model.params.get("threads", 0) or 0)
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
