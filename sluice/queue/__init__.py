"""The Redis queue protocol: sync client for workers, asyncio client for the gateway."""

from sluice.queue.client import AsyncQueueClient, QueueClient
from sluice.queue.scripts import QueueOps

__all__ = ["AsyncQueueClient", "QueueClient", "QueueOps"]
