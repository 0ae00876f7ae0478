-- cancel: cancel one job.
-- KEYS[1] in-flight zset    KEYS[2] stats hash    KEYS[3] the job hash
-- KEYS[4] per-owner unfinished-job counts
-- KEYS[5] retries waiting out their backoff (a queued job may wait there)
-- ARGV: declared by name in sluice/queue/signatures.py (CANCEL); owner is the
--   caller's API key name ('' = any): another owner's job is 'missing'.
-- Derived keys: qprefix..bucket, nprefix.. (a webhook delivery, the event stream;
--   same hash tag).
-- A queued job leaves its queue; a running job is marked cancelled and its lease
-- dropped, so the worker's late result is discarded as stale.
-- Replies (declared in CANCEL): outcome 'cancelled' with the previous status,
-- 'refused' with the status, or 'missing'.
local inflight, stats, jk = KEYS[1], KEYS[2], KEYS[3]
local f = redis.call('HMGET', jk, JOB.status, JOB.bucket, JOB.cost, JOB.owner)
local status = f[1]
if not status then return reply{outcome = 'missing', status = ''} end
if owner ~= '' and f[4] ~= owner then return reply{outcome = 'missing', status = ''} end
if TERMINAL[status] then return reply{outcome = 'refused', status = status} end
local now = now_ms()
if status == 'queued' then
  redis.call('ZREM', qprefix .. f[2], id)
  redis.call('ZREM', KEYS[5], id)
  drop_cost(stats, f[2], tonumber(f[3]))
else
  redis.call('ZREM', inflight, id)
end
release_owner(KEYS[4], f[4])
redis.call('HSET', jk, JOB.status, 'cancelled', JOB.fin, int(now))
redis.call('HDEL', jk, JOB.worker, JOB.input)
redis.call('EXPIRE', jk, result_ttl)
redis.call('HINCRBY', stats, STAT.cancelled, 1)
publish_ended(channel, {id}, jprefix, nprefix)
return reply{outcome = 'cancelled', status = status}
