"""The Redis queue protocol: everything that moves a job through Redis.

This package owns:

- **The scripts** (``lua/*.lua``): submit, claim, complete, renew, cancel and
  reclaim, each one round trip with a KEYS/ARGV header, sharing ``_common.lua``.
  ``scripts.script_source`` builds each through ``sluice.lua_loader``: the
  layouts of ``sluice/records.py`` (queue score, wait histogram, stats and hash
  fields, ranks) as generated Lua locals, and each script's call boundary from
  ``signatures.py`` (arguments, repeated groups and reply by name; the Lua
  indexes ARGV nowhere).
- **The calls** (``scripts.QueueOps``): each operation's KEYS, ARGV and reply
  parser, built once from the model config and run by both clients, so the
  worker and the gateway speak exactly the same protocol.
- **The clients** (``client.QueueClient``, sync, for workers and tools;
  ``client.AsyncQueueClient``, asyncio, for the gateway): they only execute
  calls, turning Redis errors into ``sluice.errors``.
- **The queue score.** Only this package builds or reads a score
  (``QueueOps.class_heads`` gives the autoscaler its counts by class).

Key names come from ``sluice.keys``; stored layouts from ``sluice.records``.
docs/protocol.md describes the keys and the scripts for a reader of Redis.
"""

from sluice.queue.client import AsyncQueueClient, QueueClient
from sluice.queue.scripts import QueueOps

__all__ = ["AsyncQueueClient", "QueueClient", "QueueOps"]
