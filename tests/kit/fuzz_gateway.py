"""The fuzzed gateway (tests/redis/gateway: test_fuzz_schema.py, test_fuzz_bodies.py):
a words model and a tokenizer model scaling from zero, served in process under
uvicorn on a loopback port, on fakeredis or a real Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fakeredis import FakeServer
from fakeredis import aioredis as fake_aioredis

from gateway.app import create_app
from sluice.config import SluiceConfig, parse_config

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
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            log_level="critical",
            loop="uvloop",
            http="httptools",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the fuzzed gateway did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
