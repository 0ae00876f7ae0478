-- One worker's heartbeat into its model's registry, scored by the Redis server's
-- clock: every reader compares with the same clock (TIME), however skewed the
-- worker's own is. Atomic, so a reader never sees the info without the score.
-- KEYS[1] the model's live workers (zset: id -> heartbeat expiry, epoch s, server clock)
-- KEYS[2] the model's worker info (hash: id -> WorkerInfo JSON)
-- KEYS[3] the model's live workers that claim nothing (zset, scored as KEYS[1]):
--   parked, starting, draining or quarantined; the claim script must not count
--   them as serving (bulk.reserve_workers)
-- ARGV (HEARTBEAT in sluice/registry.py): id (the worker's), info (WorkerInfo JSON),
--   ttl_ms (the heartbeat's TTL), idle ('1' while the worker claims nothing:
--   WorkerInfo.serving is false, else '0')
-- Returns the expiry (epoch ms, server clock).
local t = redis.call('TIME')
local expiry_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl_ms
local score = string.format('%.3f', expiry_ms / 1000)
redis.call('ZADD', KEYS[1], score, id)
if idle == '1' then
  redis.call('ZADD', KEYS[3], score, id)
else
  redis.call('ZREM', KEYS[3], id)
end
redis.call('HSET', KEYS[2], id, info)
return expiry_ms
