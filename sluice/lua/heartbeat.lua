-- One worker's heartbeat into its model's registry, scored by the Redis server's
-- clock: every reader compares with the same clock (TIME), however skewed the
-- worker's own is. Atomic, so a reader never sees the info without the score.
-- KEYS[1] the model's live workers (zset: id -> heartbeat expiry, epoch s, server clock)
-- KEYS[2] the model's worker info (hash: id -> WorkerInfo JSON)
-- KEYS[3] the model's live workers that claim nothing (zset, scored as KEYS[1]):
--   parked, starting, draining or quarantined; the claim script must not count
--   them as serving (bulk.reserve_workers)
-- ARGV[1] worker id   ARGV[2] WorkerInfo JSON   ARGV[3] heartbeat TTL (ms)
-- ARGV[4] '1' while the worker claims nothing (WorkerInfo.serving is false), else '0'
-- Returns the expiry (epoch ms, server clock).
local t = redis.call('TIME')
local expiry_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[3])
local score = string.format('%.3f', expiry_ms / 1000)
redis.call('ZADD', KEYS[1], score, ARGV[1])
if ARGV[4] == '1' then
  redis.call('ZADD', KEYS[3], score, ARGV[1])
else
  redis.call('ZREM', KEYS[3], ARGV[1])
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return expiry_ms
