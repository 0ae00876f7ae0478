"""The fuzzed gateway (tests/redis/gateway: test_fuzz_schema.py, test_fuzz_bodies.py):
a words model and a tokenizer model scaling from zero, served in process under
uvicorn on a loopback port, on fakeredis or a real Redis."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fakeredis import FakeServer
from fakeredis import aioredis as fake_aioredis

from gateway.app import create_app
from sluice.config import SluiceConfig, parse_config
from tests.kit.served import served

FUZZ_LIMIT = 65_536


def fuzz_config() -> SluiceConfig:
    """A words model and a tokenizer model, both scaling from zero (no worker needed);
    waits kept short so a generated ``?wait=60`` or predict cannot stall the run."""
    return parse_config(
        {
            "models": {
                "m": {
                    "handler": "synthetic",
                    "cost": {"method": "words"},
                    "autoscaling": {"min_replicas": 0},
                },
                "t": {
                    "handler": "embedding",
                    "cost": {"method": "tokenizer"},
                    "autoscaling": {"min_replicas": 0},
                },
            },
            "gateway": {
                "predict_timeout_s": 0.2,
                "max_wait_s": 0.2,
                "max_body_bytes": FUZZ_LIMIT,
                "max_batch_inputs": 16,
            },
        }
    )


@contextmanager
def serve(redis_url: str | None) -> Iterator[str]:
    """The gateway's base URL; ``redis_url`` None serves it on fakeredis."""
    cfg = fuzz_config()
    if redis_url is None:
        fake = fake_aioredis.FakeRedis(server=FakeServer(), decode_responses=True)
        app = create_app(cfg, redis=fake)
    else:
        app = create_app(cfg, redis_url)
    with served(app, log_level="critical", loop="uvloop", http="httptools") as port:
        yield f"http://127.0.0.1:{port}"
