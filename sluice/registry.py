"""Worker heartbeats: who serves which model, in what state, at what rate.

A worker writes its :class:`WorkerInfo` into a hash with a TTL and keeps its id in
the model's worker set scored by heartbeat expiry; readers list live workers in
one round trip. The gateway, the autoscaler and ``sluice status`` all read this.

Expiry is on the Redis server's clock (``TIME``), for writers and readers alike:
a worker or reader whose own clock is skewed still agrees on who is live.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from sluice import keys, lua_loader
from sluice.queue.scripts import Call
from sluice.signature import Signature

# standby: a warm-pool worker, loaded and warmed but parked: it claims nothing until
# promoted (docs/adr/0128).
WORKER_STATES = ("starting", "standby", "ready", "draining", "quarantined")


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    id: str
    model: str
    host: str
    pid: int
    device: str
    buckets: list[str]
    state: str
    started_at: float
    ready_at: float | None = None
    heartbeat_at: float = 0.0
    batches: int = 0
    jobs: int = 0
    failures: int = 0
    busy: bool = False
    service_rate: float = 0.0  # cost units per second while busy, measured
    metrics_port: int = 0
    batch_size: int = 0  # jobs in the worker's latest batch (the dashboard shows it)
    pod_name: str = ""  # its Kubernetes pod (SLUICE_POD_NAME, downward API); "" elsewhere
    # A warm-pool worker: parks (state standby) once loaded instead of claiming, until
    # promoted. True while starting toward the pool, too: not capacity on its way.
    parked: bool = False
    # A generative worker's (ADR 0144): its slots, those holding a sequence, and its
    # output tokens per second over the last 10 s; 0 for a batch worker.
    slots: int = 0
    slots_busy: int = 0
    tokens_per_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def serving(self) -> bool:
        """Claims work now: ready and not parked (a worker starting, parked, draining
        or quarantined takes nothing, so bulk.reserve_workers never counts it free)."""
        return self.state == "ready" and not self.parked

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str) -> WorkerInfo:
        data = json.loads(raw)
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


# The registry scripts' call boundaries (sluice/signature.py).
HEARTBEAT = Signature(
    "heartbeat",
    (
        ("id", "str"),  # the worker's
        ("info", "str"),  # WorkerInfo JSON
        ("ttl_ms", "num"),  # the heartbeat's TTL
        ("idle", "str"),  # '1' while the worker claims nothing (not serving), else '0'
    ),
)  # replies the expiry, epoch ms by the server's clock
PRUNE_WORKERS = Signature("prune_workers", (), group=(("id", "str"),))  # replies a count
TIME = Signature("time", (), reply=("seconds", "microseconds"))
SIGNATURES: dict[str, Signature] = {s.script: s for s in (HEARTBEAT, PRUNE_WORKERS, TIME)}


def script_source(name: str) -> str:
    """A registry script (``sluice/lua/<name>.lua``) with its prologue and no comment
    lines, through sluice.lua_loader: no shared helpers (their cluster slot probe
    would add a command to every heartbeat).

    Sent with EVAL (ADR 0111): the scripts join pipelines of plain commands (the
    worker's heartbeat and control poll, the readers' shared reads) that must stay
    one round trip; redis-py's pipelined scripts add a SCRIPT EXISTS round trip to
    every execute, and EVALSHA a NOSCRIPT retry after every Redis restart.
    """
    return lua_loader.source(
        "sluice", name, SIGNATURES[name], includes=(), constants=False, strip_comments=True
    )


def heartbeat(info: WorkerInfo, ttl_s: float) -> list[tuple[Any, ...]]:
    """Commands (pipeline them) that publish one heartbeat.

    The worker's own key expires with the TTL (liveness); the model's info hash and
    expiry zset, scored by the Redis server's clock (``heartbeat.lua``), let readers
    list every live worker in one round trip.
    """
    ttl_ms = max(1, int(ttl_s * 1000))
    raw = info.to_json()
    zset, hash_ = keys.workers_key(info.model), keys.workers_info_key(info.model)
    idle_zset = keys.idle_workers_key(info.model)
    values = {"id": info.id, "info": raw, "ttl_ms": ttl_ms, "idle": "0" if info.serving else "1"}
    return [
        ("SET", keys.worker_key(info.model, info.id), raw, "PX", ttl_ms),
        ("EVAL", script_source("heartbeat"), 3, zset, hash_, idle_zset, *HEARTBEAT.pack(values)),
    ]


def deregister(model: str, worker_id: str) -> list[tuple[Any, ...]]:
    return [
        ("DEL", keys.worker_key(model, worker_id)),
        ("HDEL", keys.workers_info_key(model), worker_id),
        ("ZREM", keys.workers_key(model), worker_id),
        ("ZREM", keys.idle_workers_key(model), worker_id),
    ]


def time_command(routing_key: str) -> tuple[Any, ...]:
    """The server's ``TIME``, as a command that may join any pipeline: keyed by one
    of a model's keys (``time.lua``), so a Redis Cluster pipeline routes it."""
    return ("EVAL", script_source("time"), 1, routing_key)


def server_time_s(reply: Any) -> float:
    """``TIME``'s reply (seconds, microseconds) as epoch seconds."""
    t, _ = TIME.unpack(reply)
    return int(t["seconds"]) + int(t["microseconds"]) / 1e6


def split_live(
    expiry_s: dict[str, float], infos: dict[str, str], now_s: float
) -> tuple[list[WorkerInfo], list[str]]:
    """Workers whose heartbeat expires after ``now_s`` (by start time), and the ids
    that lapsed (or have only one of score and info)."""
    live, stale = [], []
    for wid, raw in infos.items():
        if expiry_s.get(wid, 0.0) > now_s:
            live.append(WorkerInfo.from_json(raw))
        else:
            stale.append(wid)
    stale += [wid for wid, exp in expiry_s.items() if exp <= now_s and wid not in infos]
    return sorted(live, key=lambda w: w.started_at), stale


def list_workers_call(model: str) -> Call[tuple[list[WorkerInfo], list[str]]]:
    """Live workers of a model and the ids whose heartbeat lapsed, by the Redis
    server's clock (one round trip).

    Pass the lapsed ids to :func:`prune` to forget workers that died without
    deregistering.
    """
    cmds: list[tuple[Any, ...]] = [
        time_command(keys.workers_key(model)),
        ("ZRANGE", keys.workers_key(model), 0, -1, "WITHSCORES"),
        ("HGETALL", keys.workers_info_key(model)),
    ]

    def parse(replies: list[Any]) -> tuple[list[WorkerInfo], list[str]]:
        expiry = {wid: float(score) for wid, score in replies[1]}
        return split_live(expiry, replies[2], server_time_s(replies[0]))

    return Call(parse, commands=cmds)


def prune(model: str, stale_ids: list[str]) -> list[tuple[Any, ...]]:
    """Commands (pipeline them) that forget the ids :func:`list_workers_call` read as
    lapsed, each only if it is still lapsed when they run (``prune_workers.lua``): a
    heartbeat that landed in between keeps its worker."""
    if not stale_ids:
        return []
    zset, hash_ = keys.workers_key(model), keys.workers_info_key(model)
    idle = keys.idle_workers_key(model)
    args = PRUNE_WORKERS.pack({}, [{"id": i} for i in stale_ids])
    return [("EVAL", script_source("prune_workers"), 3, zset, hash_, idle, *args)]


def workers_by_state(workers: list[WorkerInfo]) -> dict[str, int]:
    counts = dict.fromkeys(WORKER_STATES, 0)
    for w in workers:
        counts[w.state] = counts.get(w.state, 0) + 1
    return counts


# -- control commands ---------------------------------------------------------
# A worker polls its control list (keys.worker_control_key) with each heartbeat,
# so a command reaches it within one heartbeat period, and a command sent to a
# worker that never reads it expires instead of lingering.
DRAIN = "drain"
PROMOTE = "promote"  # a parked worker starts claiming (docs/adr/0128)
PARK = "park"  # a serving worker finishes what it holds and parks
COMMANDS = (DRAIN, PROMOTE, PARK)
CONTROL_TTL_S = 3600


def send_control(model: str, worker_id: str, command: str = DRAIN) -> list[tuple[Any, ...]]:
    """Commands (pipeline them) that ask one worker to act, e.g. drain and exit 0."""
    key = keys.worker_control_key(model, worker_id)
    return [("RPUSH", key, command), ("EXPIRE", key, CONTROL_TTL_S)]


def poll_control(model: str, worker_id: str) -> tuple[Any, ...]:
    """The command a worker runs to take its next control command (None when empty)."""
    return ("LPOP", keys.worker_control_key(model, worker_id))
