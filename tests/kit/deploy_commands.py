"""Check a container's ``sluice`` arguments against the real CLI and config."""

from __future__ import annotations

import typing
from collections.abc import Callable
from pathlib import PurePosixPath

from sluice.config import AutoscalerConfig, SluiceConfig
from tests.kit.code_facts import cli_leaf_commands, cli_options

# What the deploy files run, as command paths: ``sluice bulk worker`` is ("bulk", "worker").
SUBCOMMANDS = (("gateway",), ("worker",), ("autoscaler",), ("bulk", "worker"), ("notifier",))
BULK_WORKER = ("bulk", "worker")
NOTIFIER = ("notifier",)


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


def role(args: list[str]) -> tuple[str, ...]:
    """The command path ``args`` start with: the words before the first option."""
    words: list[str] = []
    for a in args:
        if a.startswith("-"):
            break
        words.append(a)
    return tuple(words)


def command_problems(args: list[str], cfg: SluiceConfig) -> list[str]:
    """Unknown subcommands, flags the CLI does not have, values the config refuses."""
    path = role(args)
    if path not in SUBCOMMANDS:
        return [f"{list(path)}: not one of {SUBCOMMANDS}"]
    name = "sluice " + " ".join(path)
    # Read from the CLI's command tree at test time, never listed here.
    if path not in cli_leaf_commands():
        known = sorted(" ".join(p) for p in cli_leaf_commands())
        return [f"{name}: not a command of the CLI (it has {known})"]
    out = []
    opts = cli_options(path)
    for a in args[len(path) :]:
        if a.startswith("-") and a.split("=", 1)[0] not in opts:
            out.append(f"{name}: no option {a}")
    model = flag(args, "--model")
    if path == ("worker",) and model not in cfg.models:
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


def notifier_metrics_port(args: list[str], cfg: SluiceConfig) -> int:
    """``sluice notifier`` has no port flag: webhooks.metrics_port (0: no server)."""
    return int(flag(args, "--metrics-port") or cfg.webhooks.metrics_port)


def served_port(args: list[str], cfg: SluiceConfig) -> int | None:
    """The port Prometheus scrapes for ``sluice <args>`` (None: it serves none,
    or no fixed one: a metrics port of 0)."""
    ports: dict[tuple[str, ...], Callable[[list[str], SluiceConfig], int]] = {
        ("gateway",): gateway_port,
        ("worker",): worker_metrics_port,
        ("autoscaler",): autoscaler_metrics_port,
        NOTIFIER: notifier_metrics_port,
    }
    port = ports.get(role(args))
    return None if port is None else (port(args, cfg) or None)
