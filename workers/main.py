"""Build a worker from the config and command-line options, and run it."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable

import redis

from sluice.backoff import Reconnect
from sluice.config import SluiceConfig
from sluice.connection import ClientOptions, sync_client
from sluice.errors import ConfigError
from sluice.queue import QueueClient
from sluice.queue.client import connect
from sluice.redact import redact
from workers.handlers import Handler, HandlerContext, load_handler_class
from workers.worker import Worker, WorkerOptions

log = logging.getLogger("sluice.worker")


def wait_for_redis(
    url: str, timeout_s: float = 2.0, *, sleep: Callable[[float], None] = time.sleep
) -> None:
    """Block until Redis answers a PING.

    A worker started during a Redis outage waits (jittered backoff, one log line,
    a reminder a minute) instead of exiting into its supervisor's restart loop,
    whose back-off (CrashLoopBackOff: up to 5 minutes) would outlast the outage.
    A URL, password or TLS setting that can never work still fails at once: only
    connection refusals and timeouts are waited out.
    """
    client = sync_client(url, ClientOptions(timeout_s=timeout_s, read_timeout_s=timeout_s))
    retry = Reconnect(log, "worker start", cap_s=5.0)
    try:
        while True:
            try:
                client.ping()
                retry.ok()
                return
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as e:
                if isinstance(e, redis.exceptions.AuthenticationError):
                    raise
                sleep(retry.failed(redact(str(e))))
    finally:
        client.close()


def resolve_device(spec: str, uses_torch: bool) -> str:
    """``auto`` is the first CUDA device if torch sees one, else ``cpu``.

    Handlers that do not use torch (synthetic) never import it for this.
    """
    if spec in ("cpu", ""):
        return "cpu"
    if spec == "auto":
        if not uses_torch:
            return "cpu"
        import torch

        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if spec == "cuda" or spec.startswith("cuda:"):
        return "cuda:0" if spec == "cuda" else spec
    raise ConfigError(f"--device {spec!r}: use auto, cpu, cuda or cuda:N")


def parse_buckets(raw: str | None) -> list[str] | None:
    if not raw:
        return None
    return [b.strip() for b in raw.split(",") if b.strip()]


def build_worker(
    cfg: SluiceConfig, redis_url: str, opts: WorkerOptions, device_spec: str = "auto"
) -> Worker:
    if opts.model not in cfg.models:
        raise ConfigError(f"unknown model {opts.model!r}; the config has {sorted(cfg.models)}")
    mcfg = cfg.model(opts.model)
    cls = load_handler_class(mcfg.handler)
    device = resolve_device(device_spec, getattr(cls, "uses_torch", False))
    opts = WorkerOptions(**{**opts.__dict__, "device": device})
    handler = cls(HandlerContext(opts.model, mcfg, device=device))
    if mcfg.generative:
        check_engine_handler(handler, opts.model, mcfg.handler)
    client = QueueClient(connect(redis_url), dict(cfg.models))
    try:
        if mcfg.generative:
            from workers.generate.worker import GenerativeWorker

            return GenerativeWorker(cfg, client, handler, opts)  # type: ignore[arg-type]
        return Worker(cfg, client, handler, opts)
    except ValueError as e:
        raise ConfigError(str(e)) from e


def check_engine_handler(handler: Handler, model: str, spec: str) -> None:
    """A model with a generate: section runs the slot loop (ADR 0147): its handler
    must build an engine."""
    from workers.generate.handler import EngineHandler

    if not isinstance(handler, EngineHandler):
        raise ConfigError(
            f"model {model!r} has a generate: section, so its handler must build an "
            f"engine (causal-lm, or a workers.generate.handler.EngineHandler subclass); "
            f"{spec!r} does not"
        )


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s",
    )
