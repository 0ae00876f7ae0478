-- One worker's heartbeat into its model's registry, scored by the Redis server's
-- clock: every reader compares with the same clock (TIME), however skewed the
-- worker's own is. Atomic, so a reader never sees the info without the score.
-- KEYS[1] the model's live workers (zset: id -> heartbeat expiry, epoch s, server clock)
-- KEYS[2] the model's worker info (hash: id -> WorkerInfo JSON)
-- ARGV[1] worker id   ARGV[2] WorkerInfo JSON   ARGV[3] heartbeat TTL (ms)
-- Returns the expiry (epoch ms, server clock).
local t = redis.call('TIME')
local expiry_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], string.format('%.3f', expiry_ms / 1000), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return expiry_ms
