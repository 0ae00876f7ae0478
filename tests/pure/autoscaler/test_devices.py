"""Device placement for local workers (autoscaler/devices.py)."""

from __future__ import annotations

import pytest

from autoscaler.devices import DevicePool
from sluice.config import DeviceConfig


def test_device_pool_never_overcommits_memory() -> None:
    pool = DevicePool([DeviceConfig(name="0", memory_gb=16), DeviceConfig(name="1", memory_gb=8)])
    placed = [pool.place(6.0) for _ in range(3)]
    # 16 GB fits two 6 GB workers, 8 GB one: the fourth has nowhere to go.
    assert sorted(placed) == ["0", "0", "1"]  # type: ignore[type-var]
    with pytest.raises(LookupError):
        pool.place(6.0)
    pool.release("1", 6.0)
    assert pool.place(6.0) == "1"
    assert DevicePool([]).place(100.0) is None  # CPU: no budget
