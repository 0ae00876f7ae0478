"""Check a container's ``sluice`` arguments against the real CLI and config."""

from __future__ import annotations

import typing
from pathlib import PurePosixPath

from sluice.config import AutoscalerConfig, SluiceConfig
from tests.deploy.code_facts import cli_options

SUBCOMMANDS = ("gateway", "worker", "autoscaler")


def flag(args: list[str], name: str) -> str | None:
    """The value of ``--name VALUE`` (or ``--name=VALUE``) in ``args``."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def backends() -> tuple[str, ...]:
    return typing.get_args(AutoscalerConfig.model_fields["backend"].annotation)


def command_problems(args: list[str], cfg: SluiceConfig) -> list[str]:
    """Unknown subcommands, flags the CLI does not have, values the config refuses."""
    if not args or args[0] not in SUBCOMMANDS:
        return [f"{args[:1]}: not one of {SUBCOMMANDS}"]
    sub, out = args[0], []
    opts = cli_options(sub)
    for a in args[1:]:
        if a.startswith("-") and a.split("=", 1)[0] not in opts:
            out.append(f"sluice {sub}: no option {a}")
    model = flag(args, "--model")
    if sub == "worker" and model not in cfg.models:
        out.append(f"--model {model!r}: the config has {sorted(cfg.models)}")
    backend = flag(args, "--backend")
    if backend is not None and backend not in backends():
        out.append(f"--backend {backend!r}: not one of {backends()}")
    if flag(args, "--config") is None:
        out.append("no --config (the image has no default config)")
    return out


def config_path(args: list[str]) -> PurePosixPath:
    value = flag(args, "--config")
    assert value is not None
    return PurePosixPath(value)


def gateway_port(args: list[str], cfg: SluiceConfig) -> int:
    return int(flag(args, "--port") or cfg.gateway.port)


def worker_metrics_port(args: list[str], cfg: SluiceConfig) -> int:
    return int(flag(args, "--metrics-port") or cfg.worker.metrics_port)


def autoscaler_metrics_port(args: list[str], cfg: SluiceConfig) -> int:
    return int(flag(args, "--metrics-port") or cfg.autoscaler.metrics_port)


def served_port(args: list[str], cfg: SluiceConfig) -> int:
    """The port Prometheus scrapes for ``sluice <args>``."""
    ports = {"gateway": gateway_port, "worker": worker_metrics_port,
             "autoscaler": autoscaler_metrics_port}  # fmt: skip
    return ports[args[0]](args, cfg)
