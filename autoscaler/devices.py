"""Which device a new local worker goes on, without over-committing its memory.

Each model declares the memory one worker needs (``autoscaling.gpu_memory_gb``);
the pool never places more than a device has, so models sharing a GPU cannot
push it out of memory. No configured devices means CPU workers, no budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice.config import DeviceConfig


@dataclass
class DevicePool:
    devices: list[DeviceConfig]
    used_gb: dict[str, float] = field(default_factory=dict)

    def place(self, need_gb: float) -> str | None:
        """The device with the most free memory that fits ``need_gb``; reserves it.

        Raises LookupError when devices are configured and none has room; returns
        None when no devices are configured (CPU).
        """
        if not self.devices:
            return None
        best, best_free = None, -1.0
        for d in self.devices:
            free = d.memory_gb - self.used_gb.get(d.name, 0.0)
            if free + 1e-9 >= need_gb and free > best_free:
                best, best_free = d.name, free
        if best is None:
            raise LookupError(f"no device has {need_gb} GB free")
        self.used_gb[best] = self.used_gb.get(best, 0.0) + need_gb
        return best

    def release(self, name: str | None, need_gb: float) -> None:
        if name is not None:
            self.used_gb[name] = max(0.0, self.used_gb.get(name, 0.0) - need_gb)


@dataclass
class CorePool:
    """CPU cores held by CPU workers: a worker starts only where its cores are free
    (sluice/cores.py says how many one holds)."""

    total: int
    used: int = 0

    def take(self, n: int) -> None:
        """Reserve ``n`` cores; LookupError when fewer are free."""
        if n > self.total - self.used:
            raise LookupError(
                f"it needs {n} CPU core(s) and {self.total - self.used} of {self.total} are free"
            )
        self.used += n

    def give(self, n: int) -> None:
        self.used = max(0, self.used - n)
