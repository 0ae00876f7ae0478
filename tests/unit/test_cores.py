"""How many cores a CPU worker holds (sluice/cores.py): the rules, and that the
division ``sluice up`` prints never oversubscribes the machine."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sluice.config import parse_config
from sluice.cores import cores_per_worker, describe


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
