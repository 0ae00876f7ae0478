"""Every Redis key name Sluice uses, and nothing else.

All keys of one model's partition share one hash tag (``{model}`` for partition 0,
``{model~p}`` for the others, docs/adr/0159) so that a Redis Cluster keeps a
partition on one slot and every script touches one slot only. No other
module formats a key; Lua scripts receive keys (or a documented prefix with the
same hash tag) from here.
"""

from __future__ import annotations

import re

PREFIX = "sluice"
MODEL_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


# Partitions (queue.partitions, docs/adr/0159): partition 0 keeps the tag ``{model}``;
# partition p >= 1 uses ``{model~p}``, so a Cluster may place it on another shard. Model
# names never hold '~', so no model's tag is another's partition.
PARTITION_MARK = "~"
_PARTITION_RE = re.compile(r"^([1-9][0-9]{0,3})~")


def _tag(model: str, partition: int = 0) -> str:
    if partition:
        return f"{PREFIX}:{{{model}{PARTITION_MARK}{partition}}}:"
    return f"{PREFIX}:{{{model}}}:"


def partition_of(job_id: str) -> int:
    """The partition a job (or delivery) id was made in: ``<model>.<p>~<token>`` for
    p >= 1; every other id (all ids from before partitions, bulk ids) is partition 0."""
    _, _, token = job_id.partition(".")
    m = _PARTITION_RE.match(token)
    return int(m.group(1)) if m else 0


def model_prefix(model: str) -> str:
    """``sluice:{model}:`` -- what scripts append suffixes to (same hash tag)."""
    return _tag(model)


def job_prefix(model: str, partition: int = 0) -> str:
    return f"{_tag(model, partition)}job:"


def job_key(model: str, job_id: str) -> str:
    """A job's hash, in the partition its id names (:func:`partition_of`)."""
    return f"{job_prefix(model, partition_of(job_id))}{job_id}"


def queue_prefix(model: str, partition: int = 0) -> str:
    return f"{_tag(model, partition)}q:"


def queue_key(model: str, bucket: str, partition: int = 0) -> str:
    return f"{queue_prefix(model, partition)}{bucket}"


def inflight_key(model: str, partition: int = 0) -> str:
    return f"{_tag(model, partition)}inflight"


def stats_key(model: str, partition: int = 0) -> str:
    return f"{_tag(model, partition)}stats"


def partitions_key(model: str) -> str:
    """Zset of one member whose score is the most partitions this model's queues were
    ever spread over (raised with ZADD GT): readers and claims keep visiting them
    all, so lowering ``queue.partitions`` drains the old ones (docs/adr/0159)."""
    return f"{_tag(model)}partitions"


def seq_key(model: str, partition: int = 0) -> str:
    return f"{_tag(model, partition)}seq"


def retry_key(model: str, partition: int = 0) -> str:
    """Zset of queued retries waiting out their backoff, scored by when each becomes
    claimable (epoch ms, the Redis clock); claim and reclaim move due ones into their
    queues (docs/adr/0153)."""
    return f"{_tag(model, partition)}retry"


def dead_letter_key(model: str, partition: int = 0) -> str:
    return f"{_tag(model, partition)}dead"


def idempotency_prefix(model: str, partition: int = 0) -> str:
    return f"{_tag(model, partition)}idem:"


def idempotency_key(model: str, key: str, partition: int = 0) -> str:
    return f"{idempotency_prefix(model, partition)}{key}"


def done_channel(model: str) -> str:
    return f"{_tag(model)}done"


def stream_prefix(model: str, partition: int = 0) -> str:
    """Per-job token streams: ``<prefix><job id>`` (a generative job's Redis Stream,
    ADR 0144; same hash tag as the job, so one script writes both)."""
    return f"{_tag(model, partition)}stream:"


def stream_key(model: str, job_id: str) -> str:
    return f"{stream_prefix(model, partition_of(job_id))}{job_id}"


def ttft_hist_prefix(model: str) -> str:
    """Time-to-first-token histogram, one hash per window (the wait histogram's
    layout, ``sluice.records``): ``<prefix><window start s>``, written by the
    generative step script (sluice/generate/lua/step.lua)."""
    return f"{_tag(model)}ttft:"


def ttft_hist_key(model: str, window_start_s: int) -> str:
    return f"{ttft_hist_prefix(model)}{window_start_s}"


def wake_prefix(model: str, partition: int = 0) -> str:
    """Per-bucket wake lists: ``<prefix><bucket>`` (what scripts append to)."""
    return f"{_tag(model, partition)}wake:"


def wake_key(model: str, bucket: str, partition: int = 0) -> str:
    """List of wake-up tokens (at most 64) for one bucket; idle workers serving
    it block on it (BLPOP)."""
    return f"{wake_prefix(model, partition)}{bucket}"


def wait_hist_prefix(model: str, partition: int = 0) -> str:
    """Per-window queue-wait histograms: ``<prefix><window_start_s>``."""
    return f"{_tag(model, partition)}waith:"


def wait_hist_key(model: str, window_start_s: int, partition: int = 0) -> str:
    return f"{wait_hist_prefix(model, partition)}{window_start_s}"


def e2e_hist_prefix(model: str, partition: int = 0) -> str:
    """Per-window end-to-end latency histograms (enqueue to finish of succeeded
    jobs, written by the complete script): ``<prefix><window_start_s>``."""
    return f"{_tag(model, partition)}e2eh:"


def e2e_hist_key(model: str, window_start_s: int, partition: int = 0) -> str:
    return f"{e2e_hist_prefix(model, partition)}{window_start_s}"


def decisions_key(model: str) -> str:
    """List of the autoscaler's recent decisions (JSON, newest first, bounded)."""
    return f"{_tag(model)}scale:log"


def scale_state_key(model: str) -> str:
    """Hash of the autoscaler's latest decision: current, desired, reason, at_ms."""
    return f"{_tag(model)}scale:now"


def pool_history_key(model: str) -> str:
    """Sorted set: the warm pool's per-minute history (``records.PoolMinute`` JSON, scored
    by the minute's wall-clock start), read back by a restarted autoscaler (ADR 0156)."""
    return f"{_tag(model)}scale:pool"


def worker_prefix(model: str) -> str:
    return f"{_tag(model)}worker:"


def worker_key(model: str, worker_id: str) -> str:
    return f"{worker_prefix(model)}{worker_id}"


def workers_key(model: str, partition: int = 0) -> str:
    """Zset of live worker ids scored by heartbeat expiry (epoch seconds, Redis server clock)."""
    return f"{_tag(model, partition)}workers"


def idle_workers_key(model: str, partition: int = 0) -> str:
    """Zset of the live workers that claim nothing (parked in the warm pool, still
    starting, draining or quarantined), scored like :func:`workers_key`: the claim
    script subtracts them to count the workers that serve, for
    ``bulk.reserve_workers``."""
    return f"{_tag(model, partition)}workers:idle"


def workers_info_key(model: str, partition: int = 0) -> str:
    """Hash of worker id -> last heartbeat JSON (the claim script reads a worker's
    buckets there: ADR 0166). Workers register in partition 0 only."""
    return f"{_tag(model, partition)}workers:info"


def worker_control_key(model: str, worker_id: str) -> str:
    return f"{_tag(model)}control:{worker_id}"


def paused_key(model: str, partition: int = 0) -> str:
    """Hash of a paused model (``records.PauseField``); absent while it runs. Its
    existence is what claim.lua checks (one EXISTS): no worker claims (ADR 0154).
    Partition 0's is the record; every other partition holds a copy for its claims."""
    return f"{_tag(model, partition)}paused"


def audit_key() -> str:
    """Stream of operator actions (``sluice.audit``; fields ``records.AuditField``),
    capped. One key outside every model's hash tag, like the registry (ADR 0151)."""
    return f"{PREFIX}:audit"


def bench_key(name: str) -> str:
    """Scratch keys of benchmarks (never read by Sluice itself)."""
    return f"{PREFIX}:bench:{name}"


def owner_jobs_key(model: str, partition: int = 0) -> str:
    """Hash of API-key name -> that owner's unfinished (queued + running) jobs.

    Raised by submit, lowered wherever a job ends; only jobs with an owner count.
    """
    return f"{_tag(model, partition)}owners"


def rate_limit_key(model: str, partition: int = 0) -> str:
    """Hash of API-key name -> "<tokens>:<last refill ms>" (the per-key token bucket)."""
    return f"{_tag(model, partition)}ratelimit"


# -- webhook deliveries and event streams (sluice/webhooks, docs/adr/0131) ----------
def notify_prefix(model: str, partition: int = 0) -> str:
    """``<prefix><job or bulk id>``: one webhook delivery's hash. Ids always hold a
    '.', so the fixed names below (which scripts derive from this prefix) never
    collide with a delivery."""
    return f"{_tag(model, partition)}notify:"


def delivery_key(model: str, job_id: str) -> str:
    return f"{notify_prefix(model, partition_of(job_id))}{job_id}"


def deliveries_due_key(model: str, partition: int = 0) -> str:
    """Zset of delivery ids by when each is due (epoch ms, the Redis clock); a claimed
    one is pushed out by its lease, so a notifier that dies loses nothing."""
    return f"{notify_prefix(model, partition)}due"


def deliveries_lanes_key(model: str, partition: int = 0) -> str:
    """Zset of hosts with a lane (a notifier had them full when their deliveries fell
    due), by the earliest due time (ms) in that lane (docs/adr/0139)."""
    return f"{notify_prefix(model, partition)}lanes"


def deliveries_lane_sizes_key(model: str, partition: int = 0) -> str:
    """Hash of host -> how many deliveries its lane holds (what the backlog counts)."""
    return f"{notify_prefix(model, partition)}lanesizes"


def deliveries_lane_prefix(model: str, partition: int = 0) -> str:
    """``<prefix><host>``: one host's lane, a zset of due delivery ids by due time
    (ms). claim.lua derives these keys from the prefix (same hash tag; only it
    formats them); it lies outside ``notify_prefix`` so a host never reads as a
    delivery id."""
    return f"{_tag(model, partition)}notify-lane:"


def deliveries_wake_key(model: str, partition: int = 0) -> str:
    """List of wake-up tokens (at most 64) an idle notifier blocks on (BLPOP)."""
    return f"{notify_prefix(model, partition)}wake"


def deliveries_dead_key(model: str, partition: int = 0) -> str:
    """List of delivery ids that gave up (newest first, bounded)."""
    return f"{notify_prefix(model, partition)}dead"


def events_key(model: str, partition: int = 0) -> str:
    """Stream of the model's ended jobs (id -> status pairs per entry), capped."""
    return f"{notify_prefix(model, partition)}events"


# -- bulk jobs (sluice/bulk): a bulk job's keys share its model's hash tag ----------
def bulk_key(model: str, bulk_id: str) -> str:
    """Hash of one bulk job: state, counts, the feed cursor, the coordinator's lease."""
    return f"{_tag(model)}bulk:{bulk_id}"


def bulk_input_key(model: str, bulk_id: str) -> str:
    """List of the uploaded lines, in input order (raw text, parsed when fed)."""
    return f"{bulk_key(model, bulk_id)}:in"


def bulk_pending_key(model: str, bulk_id: str) -> str:
    """Hash of line index -> job id: lines fed whose outcome is not yet gathered."""
    return f"{bulk_key(model, bulk_id)}:pending"


def bulk_output_key(model: str, bulk_id: str) -> str:
    """Hash of line index -> output line (JSON), gathered once per index."""
    return f"{bulk_key(model, bulk_id)}:out"


def bulk_active_key(model: str) -> str:
    """Zset of this model's unfinished bulk ids scored by their coordinator's lease
    expiry (epoch ms; 0 = never started): the reaper resumes lapsed ones."""
    return f"{_tag(model)}bulk:active"


def bulk_backlog_key(model: str) -> str:
    """Hash of bulk id -> JSON {queued, queued_cost, backlog_cost, at_ms}, written by
    each coordinator as it runs: the autoscaler's bulk signal (ADR 0090)."""
    return f"{_tag(model)}bulk:backlog"


def busy_workers_key(model: str, partition: int = 0) -> str:
    """Zset of worker ids holding a batch (any: interactive or bulk, or one running
    beside a prefetch), scored by its lease expiry (ms); a worker whose claim found
    nothing leaves it. Kept by the claim script only for ``bulk.idle_reserve``
    (ADR 0164): bulk only while enough other serving workers are not in it."""
    return f"{_tag(model, partition)}workers:busy"


def bulk_holders_key(model: str, partition: int = 0) -> str:
    """Zset of worker ids running a bulk batch, scored by its lease expiry (ms): how
    many workers bulk holds, for ``bulk.reserve_workers`` (ADR 0090)."""
    return f"{_tag(model, partition)}bulk:holders"
