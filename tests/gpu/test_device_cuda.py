"""Device choice on a GPU machine: ``--device auto``, the dtype check, and the local
autoscaler backend pinning each worker to its device with CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import torch
import yaml

from autoscaler.backends.local import LocalBackend
from sluice.config import SluiceConfig, parse_config
from sluice.errors import ConfigError
from sluice.jobs import JobStatus
from sluice.queue import QueueClient
from tests.kit.cuda import needs_cuda
from tests.kit.workers import MODEL, submit, worker_config
from tests.waits import wait_until
from workers.handlers import HandlerContext, make_handler
from workers.main import build_worker, resolve_device
from workers.worker import WorkerOptions

pytestmark = needs_cuda
ROOT = Path(__file__).resolve().parents[2]


def test_device_auto_picks_the_first_cuda_device(redis_url: str) -> None:
    assert resolve_device("auto", uses_torch=True) == "cuda:0"
    assert resolve_device("auto", uses_torch=False) == "cpu"  # synthetic stays off the GPU
    cfg = worker_config("tiny")
    worker = build_worker(cfg, redis_url, WorkerOptions(model=MODEL, metrics_port=-1), "auto")
    assert worker.opts.device == "cuda:0"
    worker.handler.load()
    assert worker.handler.embed.device == torch.device("cuda:0")  # type: ignore[attr-defined]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_dtype_is_accepted_exactly_where_the_gpu_runs_it(dtype: str) -> None:
    native = dtype == "float16" or torch.cuda.get_device_capability(0) >= (8, 0)
    cfg = worker_config("tiny", params={"dtype": dtype})
    ctx = HandlerContext(MODEL, cfg.model(MODEL), device="cuda:0")
    if not native:
        with pytest.raises(ConfigError, match=r"models\.m\.params\.dtype 'bfloat16' on cuda:0"):
            make_handler(ctx)
        return
    h = make_handler(ctx)
    h.load()
    assert h.embed.dtype == getattr(torch, dtype)  # type: ignore[attr-defined]


def local_config() -> SluiceConfig:
    n = min(2, torch.cuda.device_count())
    return parse_config(
        {
            "models": {
                MODEL: {
                    "handler": "tests.kit.gpu_handlers:WhereAmIHandler",
                    "autoscaling": {"max_replicas": n, "gpu_memory_gb": 1},
                }
            },
            "worker": {"heartbeat_s": 0.2},
            "autoscaler": {
                "devices": [{"name": str(i), "memory_gb": 1} for i in range(n)],
                "drain_timeout_s": 30,
            },
        }
    )


@pytest.fixture
def backend(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LocalBackend]:
    cfg = local_config()
    path = tmp_path / "sluice.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json", exclude_none=True)))
    # The spawned `sluice worker` imports tests.kit.gpu_handlers from this checkout.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    be = LocalBackend(cfg, path, redis_url, log_dir=tmp_path / "logs")
    yield be
    be.close(timeout_s=30)


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_the_local_backend_pins_each_worker_to_its_device(
    backend: LocalBackend, r: redis.Redis
) -> None:
    n = len(backend.cfg.autoscaler.devices)  # one per GPU, at most 2, 1 GB each
    backend.scale(MODEL, n, [])
    spawned = backend.models[MODEL].workers
    assert sorted(str(w.device) for w in spawned) == [str(i) for i in range(n)]
    for w in spawned:
        assert environ_of(w.proc.pid)["CUDA_VISIBLE_DEVICES"] == w.device
    qc = QueueClient(r, dict(backend.cfg.models))
    ids = submit(qc, backend.cfg, ["where am i"] * 4)
    done = wait_until(lambda: all(qc.get(i).status == JobStatus.SUCCEEDED for i in ids), 180)
    assert done
    seen = [qc.get(i).result for i in ids]
    for result in seen:  # each worker sees its one device only, as cuda:0
        assert result["device_count"] == 1 and result["device"] == "cuda:0"
        assert result["cuda_visible_devices"] in {str(w.device) for w in spawned}
    if n == 1 and "CUDA_VISIBLE_DEVICES" not in os.environ:  # "0" is this process's cuda:0
        assert seen[0]["uuid"] == str(torch.cuda.get_device_properties(0).uuid)
    backend.close(timeout_s=30)  # a drain: each worker exits 0
    assert [w.proc.returncode for w in spawned] == [0] * n
