"""What every section of the config file shares: the strict base model and the
priority names, and the environment variables that name the file and Redis."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

PRIORITIES: tuple[str, ...] = ("high", "normal", "low")
CONFIG_ENV = "SLUICE_CONFIG"
REDIS_URL_ENV = "SLUICE_REDIS_URL"
# A worker's own pod name, set from metadata.name by the downward API (docs/adr/0115).
POD_NAME_ENV = "SLUICE_POD_NAME"


def known_priorities(by_priority: dict[str, float]) -> None:
    unknown = set(by_priority) - set(PRIORITIES)
    if unknown:
        raise ValueError(f"unknown priority {sorted(unknown)}; use {list(PRIORITIES)}")


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
