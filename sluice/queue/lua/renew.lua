-- renew: extend the leases this worker still holds, and end the held jobs past a limit.
-- KEYS[1] in-flight zset   KEYS[2] workers running a bulk batch (its entry follows)
-- KEYS[3] stats hash   KEYS[4] dead-letter list   KEYS[5] per-owner unfinished-job counts
-- ARGV: declared by name in sluice/queue/signatures.py (RENEW): the fixed values,
--   then one group per job id.
-- Derived keys: jprefix..id, nprefix.. (webhook deliveries, the event stream; same
--   hash tag).
-- A lease is renewed only while the job is running under this worker and within its
-- limits (ADR 0154): past its deadline it ends 'expired', running longer than
-- max_run_ms (0: no limit) it fails for good as RUN_TIME_EXCEEDED, so the worker
-- learns of it on this, its regular renewal (no round trip of its own) and stops.
-- Replies (declared in RENEW): per id not renewed, why: LEASE_LOST 'lost' (requeued
-- or another worker's: its result still counts if it comes first), else how it ended
-- (its terminal status: cancelled, expired, succeeded, failed, or RUN_TIME_EXCEEDED).
local inflight = KEYS[1]
local now = now_ms()
local expiry = now + lease_ms
local ks = {inflight = inflight, stats = KEYS[3], dead = KEYS[4], owners = KEYS[5],
            result_ttl = result_ttl, dead_ttl = dead_ttl}
local out, ended = {}, {}
for i = 1, N_GROUPS do
  local id = arg_group(i).id
  local jk = jprefix .. id
  local f = redis.call('HMGET', jk, JOB.status, JOB.worker, JOB.dl, JOB.start)
  local status = f[1]
  if status == 'running' and f[2] == worker then
    local why = over_limit(f[3], f[4], now, max_run_ms)
    if why then
      end_over_limit(jk, id, why, ks, now, max_run_ms, ended)
      reply_group(out, {id = id, why = why})
    else
      redis.call('ZADD', inflight, 'XX', expiry, id)
    end
  elseif status and TERMINAL[status] then
    reply_group(out, {id = id, why = status})
  else
    reply_group(out, {id = id, why = LEASE_LOST})
  end
end
if KEYS[2] then redis.call('ZADD', KEYS[2], 'XX', expiry, worker) end
publish_ended(channel, ended, jprefix, nprefix)
return out
