-- redeliver: send a delivery again (an admin's POST /v1/admin/webhooks/{id}/redeliver),
-- a fresh round of retries from now, with the same webhook-id and body.
-- KEYS[1] the due zset   KEYS[2] the delivery hash   KEYS[3] the dead list
-- KEYS[4] the wake list
-- ARGV[1] id   ARGV[2] the record's TTL s
-- Returns {'ok', previous state} | {'missing', ''}.
local due, dk, dead = KEYS[1], KEYS[2], KEYS[3]
local state = redis.call('HGET', dk, 'state')
if not state then return {'missing', ''} end
local now = now_ms()
redis.call('HSET', dk, 'state', 'pending', 'fails', 0, 'cerr', 0, 'first', int(now))
redis.call('HDEL', dk, 'lease', 'done', 'next')
redis.call('ZADD', due, now, ARGV[1])
redis.call('LREM', dead, 0, ARGV[1])
redis.call('EXPIRE', dk, tonumber(ARGV[2]))
wake(KEYS[4], 1)
return {'ok', state}
