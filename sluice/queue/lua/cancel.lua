-- cancel: cancel one job.
-- KEYS[1] in-flight zset    KEYS[2] stats hash    KEYS[3] the job hash
-- KEYS[4] per-owner unfinished-job counts
-- ARGV[1] queue key prefix  ARGV[2] done channel  ARGV[3] job id  ARGV[4] result TTL s
-- ARGV[5] the caller's API key name ('' = any): another owner's job is 'missing'
-- Derived keys: ARGV[1]..bucket (same hash tag).
-- A queued job leaves its queue; a running job is marked cancelled and its lease
-- dropped, so the worker's late result is discarded as stale.
-- Returns {'cancelled', previous status} or {'refused', status} or {'missing', ''}.
local inflight, stats, jk = KEYS[1], KEYS[2], KEYS[3]
local qprefix, channel, id, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local f = redis.call('HMGET', jk, 'status', 'bucket', 'cost', 'owner')
local status = f[1]
if not status then return {'missing', ''} end
if ARGV[5] and ARGV[5] ~= '' and f[4] ~= ARGV[5] then return {'missing', ''} end
if TERMINAL[status] then return {'refused', status} end
local now = now_ms()
if status == 'queued' then
  redis.call('ZREM', qprefix .. f[2], id)
  drop_cost(stats, f[2], tonumber(f[3]))
else
  redis.call('ZREM', inflight, id)
end
release_owner(KEYS[4], f[4])
redis.call('HSET', jk, 'status', 'cancelled', 'fin', int(now))
redis.call('HDEL', jk, 'worker', 'input')
redis.call('EXPIRE', jk, ttl)
redis.call('HINCRBY', stats, STAT.cancelled, 1)
publish_ended(channel, {id})
return {'cancelled', status}
