"""Real ``sluice worker`` processes on the tiny GPT for the generative process
tests (tests/process/generate): the tiny-GPT config and ``Workers``, the
processes of one test or module, started through sluice.local.children."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sluice.config import SluiceConfig, parse_config
from sluice.local.children import Child, Children

MODEL = "tiny-gpt"


def tiny_config(lease_s: float = 1.5, slots: int = 4) -> dict[str, Any]:
    """Model tiny-gpt on tiny:4x256, 1 torch thread; heartbeats every 0.2 s."""
    return {
        "models": {
            MODEL: {
                "handler": "causal-lm",
                "params": {"model": "tiny:4x256", "threads": 1},
                "buckets": [64, 256, 512],
                "cost": {"method": "words"},
                "batching": {"lease_s": lease_s, "max_attempts": 3},
                "generate": {
                    "slots": slots,
                    "max_seq_tokens": 512,
                    "default_max_tokens": 128,
                    "prefill_tokens_per_step": 64,
                },
            }
        },
        "worker": {"heartbeat_s": 0.2},
    }


class Workers:
    """``sluice worker`` processes, each logging to a file under ``tmp``."""

    def __init__(self, tmp: Path, redis_url: str) -> None:
        self.children = Children(tmp / "logs")
        self.tmp, self.redis_url = tmp, redis_url

    def config(self, raw: dict[str, Any], name: str = "sluice.yaml") -> tuple[Path, SluiceConfig]:
        path = self.tmp / name
        path.write_text(yaml.safe_dump(raw))
        return path, parse_config(raw)

    def spawn(self, name: str, path: Path, *extra: str) -> Child:
        args = ["worker", "-c", str(path), "-m", MODEL, "--redis-url", self.redis_url]
        return self.children.spawn(name, [*args, "--metrics-port", "-1", *extra])

    @staticmethod
    def log(child: Child) -> str:
        child.log.flush()
        return child.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.children.stop(self.children.all, timeout_s=10)
