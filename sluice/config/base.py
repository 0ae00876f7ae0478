"""What every section of the config file shares: the strict base model and the
priority names (and, from ``sluice.envnames``, the environment variables that
name the file and Redis)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from sluice.envnames import CONFIG_ENV, POD_NAME_ENV, REDIS_URL_ENV

__all__ = [
    "CONFIG_ENV",
    "POD_NAME_ENV",
    "PRIORITIES",
    "REDIS_URL_ENV",
    "StrictModel",
    "known_priorities",
]

PRIORITIES: tuple[str, ...] = ("high", "normal", "low")


def known_priorities(by_priority: dict[str, float]) -> None:
    unknown = set(by_priority) - set(PRIORITIES)
    if unknown:
        raise ValueError(f"unknown priority {sorted(unknown)}; use {list(PRIORITIES)}")


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
