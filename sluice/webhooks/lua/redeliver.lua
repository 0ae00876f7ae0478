-- redeliver: send a delivery again (an admin's POST /v1/admin/webhooks/{id}/redeliver),
-- a fresh round of retries from now, with the same webhook-id and body.
-- KEYS[1] the due zset   KEYS[2] the delivery hash   KEYS[3] the dead list
-- KEYS[4] the wake list   KEYS[5] the job hash   KEYS[6] the bulk job hash (same id)
-- ARGV[1] id   ARGV[2] the record's TTL s
-- The job's (or bulk job's) record is held again while the delivery is pending
-- (hold_record, _common.lua); one that has expired is sent as record_expired.
-- Returns {'ok', previous state} | {'missing', ''}.
local due, dk, dead = KEYS[1], KEYS[2], KEYS[3]
local f = redis.call('HMGET', dk, 'state', 'kind')
local state = f[1]
if not state then return {'missing', ''} end
local now = now_ms()
redis.call('HSET', dk, 'state', 'pending', 'fails', 0, 'cerr', 0, 'first', int(now))
redis.call('HDEL', dk, 'lease', 'done', 'next')
redis.call('ZADD', due, now, ARGV[1])
redis.call('LREM', dead, 0, ARGV[1])
redis.call('EXPIRE', dk, tonumber(ARGV[2]))
hold_record(f[2] == 'bulk' and KEYS[6] or KEYS[5], dk, tonumber(ARGV[2]))
wake(KEYS[4], 1)
return {'ok', state}
