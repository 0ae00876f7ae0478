"""How many cores a CPU worker holds (sluice/cores.py): the rules, that the
division ``sluice up`` prints never oversubscribes the machine, and that the
machine's cores are those the cgroup CPU quota allows."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.config import parse_config
from sluice.cores import cgroup_cpu_limit, cores_per_worker, describe, machine_cores


def _model(handler: str = "embedding", params: dict | None = None, **autoscaling: object):  # type: ignore[no-untyped-def,type-arg]
    auto = {"min_replicas": 0, **autoscaling}
    cfg = parse_config(
        {"models": {"m": {"handler": handler, "params": params or {}, "autoscaling": auto}}}
    )
    return cfg.models["m"]


def test_the_rules_in_order() -> None:
    assert cores_per_worker(_model(max_replicas=2), 2) == 1  # the example on 2 cores
    assert cores_per_worker(_model(max_replicas=1), 8) == 8  # one worker: every core
    assert cores_per_worker(_model(max_replicas=16), 2) == 1  # at least one
    assert cores_per_worker(_model(params={"num_threads": 3}, max_replicas=1), 8) == 3
    assert cores_per_worker(_model(params={"num_threads": 3}, max_replicas=1), 2) == 2  # fits
    assert cores_per_worker(_model("synthetic", max_replicas=8), 2) == 0  # it sleeps
    assert cores_per_worker(_model("synthetic", cpu_cores=2), 8) == 2  # said so
    assert cores_per_worker(_model(params={"num_threads": 3}, cpu_cores=0), 8) == 0


@given(
    total=st.integers(1, 64),
    replicas=st.integers(1, 32),
    threads=st.integers(0, 16),
)
def test_what_fits_never_oversubscribes(total: int, replicas: int, threads: int) -> None:
    params = {"num_threads": threads} if threads else {}
    m = _model(params=params, max_replicas=replicas)
    per = cores_per_worker(m, total)
    fit = min(replicas, total // per)
    assert 1 <= per <= total and fit >= 1 and fit * per <= total
    if not threads:  # derived: the model's max_replicas fit when the cores allow one each
        assert fit == min(replicas, total)


def test_describe_says_how_the_machine_is_divided() -> None:
    cfg = parse_config(
        {
            "models": {
                "minilm": {"handler": "embedding", "autoscaling": {"max_replicas": 2}},
                "big": {
                    "handler": "embedding",
                    "params": {"num_threads": 4},
                    "autoscaling": {"max_replicas": 2},
                },
                "synthetic": {"handler": "synthetic", "autoscaling": {"max_replicas": 8}},
            },
            "autoscaler": {"cpu_cores": 2},
        }
    )
    assert describe(cfg) == [
        "2 CPU cores for workers",
        "minilm: 1 core(s) per worker, up to 2 worker(s) on the CPU",
        "big: 2 core(s) per worker, up to 1 worker(s) on the CPU"
        " (max_replicas 2 would oversubscribe them)",
        "synthetic: holds no cores, up to 8 workers",
    ]


# -- the cgroup CPU quota (issue 28 item 6): fake cgroup trees under tmp_path -----------
SIXTEEN = set(range(16))


def _tree(tmp_path: Path, files: dict[str, str], own: str = "0::/\n") -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    root.mkdir()
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text(own)
    return root, proc


V2 = {"cgroup.controllers": "cpu io memory\n"}


@pytest.mark.parametrize(
    ("files", "own", "limit"),
    [
        ({**V2, "cpu.max": "200000 100000\n"}, "0::/\n", 2.0),  # 2 of 16 cores
        ({**V2, "cpu.max": "max 100000\n"}, "0::/\n", None),  # no limit
        ({**V2, "cpu.max": "50000 100000\n"}, "0::/\n", 0.5),
        (V2, "0::/\n", None),  # the root cgroup has no cpu.max
        # Nested (no cgroup namespace): the process's own cgroup and its ancestors.
        (
            {**V2, "a/cpu.max": "max 100000\n", "a/b/cpu.max": "150000 100000\n"},
            "0::/a/b\n",
            1.5,
        ),
        ({**V2, "a/cpu.max": "300000 100000\n", "a/b/cpu.max": "max 100000\n"}, "0::/a/b", 3.0),
        # v1: the cpu controller's quota and period (-1: no limit).
        (
            {"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"},
            "4:cpu,cpuacct:/\n",
            4.0,
        ),
        (
            {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},
            "4:cpu,cpuacct:/\n",
            None,
        ),
        (  # a v1 container sees its own cgroup at the mount's root, not at its path
            {"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"},
            "4:cpu,cpuacct:/docker/abc\n",
            2.0,
        ),
        (  # the controller mounted as cpu,cpuacct, the path outside our namespace
            {"cpu,cpuacct/cpu.cfs_quota_us": "300000", "cpu,cpuacct/cpu.cfs_period_us": "100000"},
            "4:cpu,cpuacct:/../../x\n",
            3.0,
        ),
        ({}, "", None),  # no cgroup files at all (not Linux, or not mounted)
    ],
)
def test_the_cgroup_quota_in_cores(
    tmp_path: Path, files: dict[str, str], own: str, limit: float | None
) -> None:
    root, proc = _tree(tmp_path, files, own)
    assert cgroup_cpu_limit(root, proc) == limit


@pytest.mark.parametrize(
    "files",
    [
        {**V2, "cpu.max": "lots 100000\n"},
        {**V2, "cpu.max": "200000 0\n"},
        {**V2, "cpu.max": "\n"},
        {**V2, "cpu.max": "-5 100000\n"},
        {"cpu/cpu.cfs_quota_us": "two\n", "cpu/cpu.cfs_period_us": "100000\n"},
        {"cpu/cpu.cfs_quota_us": "200000\n"},  # no period
    ],
)
def test_malformed_quota_files_mean_no_limit(tmp_path: Path, files: dict[str, str]) -> None:
    root, proc = _tree(tmp_path, files, "4:cpu,cpuacct:/\n0::/\n")
    assert cgroup_cpu_limit(root, proc) is None


@pytest.mark.parametrize(
    ("cpu_max", "cores"),
    [("200000 100000", 2), ("150000 100000", 2), ("10000 100000", 1), ("max 100000", 16)],
)
def test_machine_cores_is_the_smaller_of_affinity_and_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu_max: str, cores: int
) -> None:
    # A container limited to 2 of 16 cores gave every worker 16 / max_replicas threads.
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: SIXTEEN, raising=False)
    root, proc = _tree(tmp_path, {**V2, "cpu.max": cpu_max})
    assert machine_cores(root, proc) == cores
