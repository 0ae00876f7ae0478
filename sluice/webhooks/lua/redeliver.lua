-- redeliver: send a delivery again (an admin's POST /v1/admin/webhooks/{id}/redeliver),
-- a fresh round of retries from now, with the same webhook-id and body.
-- KEYS[1] the due zset   KEYS[2] the delivery hash   KEYS[3] the dead list
-- KEYS[4] the wake list   KEYS[5] the job hash   KEYS[6] the bulk job hash (same id)
-- ARGV (REDELIVER in sluice/webhooks/signatures.py): id, ttl_s (the record's TTL)
-- The job's (or bulk job's) record is held again while the delivery is pending
-- (hold_record, _common.lua); one that has expired is sent as record_expired.
-- Returns {'ok', previous state} | {'missing', ''}.
local due, dk, dead = KEYS[1], KEYS[2], KEYS[3]
local f = redis.call('HMGET', dk, DELIVERY.state, DELIVERY.kind)
local state = f[1]
if not state then return reply{status = 'missing', state = ''} end
local now = now_ms()
redis.call('HSET', dk, DELIVERY.state, 'pending', DELIVERY.fails, 0, DELIVERY.cerr, 0,
           DELIVERY.first, int(now))
redis.call('HDEL', dk, DELIVERY.lease, DELIVERY.done, DELIVERY.next)
redis.call('ZADD', due, now, id)
redis.call('LREM', dead, 0, id)
redis.call('EXPIRE', dk, ttl_s)
hold_record(f[2] == 'bulk' and KEYS[6] or KEYS[5], dk, ttl_s)
wake(KEYS[4], 1)
return reply{status = 'ok', state = state}
