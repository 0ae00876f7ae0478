-- done: record one attempt of a webhook delivery and what comes next.
-- KEYS[1] the due zset   KEYS[2] the delivery hash   KEYS[3] the dead list
-- KEYS[4] the job's (or bulk job's) hash, held while the delivery is pending
-- ARGV (DONE in sluice/webhooks/signatures.py): id, token (the lease's), outcome
--   ('delivered' | 'retry' | 'dead'), retry_ms (until the retry), http_status (0:
--   none: refused, timed out, ...), failure (what went wrong, '' = nothing),
--   latency_ms, client_error ('1' when a 4xx other than 410/429), delivered_ttl and
--   dead_ttl (s a delivered or given-up record is kept), log_keep (attempts logged)
-- Only the lease's holder records (a notifier whose lease lapsed is 'stale').
-- A delivery that ends (delivered or given up) lets its job go: the job's own TTL
-- ('jttl', see hold_record in _common.lua) applies again, counted from now; the
-- record keeps its attempt log, never the body (a copy of the job's result).
-- Returns {'ok' | 'stale'}.
local due, dk, dead = KEYS[1], KEYS[2], KEYS[3]
local f = redis.call('HMGET', dk, DELIVERY.lease, DELIVERY.state, DELIVERY.log)
if f[1] ~= token or f[2] ~= 'pending' then return reply{status = 'stale'} end
local now = now_ms()
local log = {}
if f[3] then
  local ok, parsed = pcall(cjson.decode, f[3])
  if ok and type(parsed) == 'table' then log = parsed end
end
table.insert(log, {at = now, status = tonumber(http_status), ms = latency_ms,
                   error = failure})
while #log > log_keep do table.remove(log, 1) end
redis.call('HSET', dk, DELIVERY.log, cjson.encode(log), DELIVERY.last_status, http_status,
           DELIVERY.last_error, failure, DELIVERY.last_at, int(now))
redis.call('HDEL', dk, DELIVERY.lease)
local function release()
  local own = redis.call('HGET', dk, DELIVERY.jttl)
  -- Never longer than the job would have lived (a dead-lettered job's own TTL, days,
  -- outlasts its delivery: it keeps counting down).
  if own and redis.call('TTL', KEYS[4]) > tonumber(own) then
    redis.call('EXPIRE', KEYS[4], tonumber(own))
  end
  redis.call('HDEL', dk, DELIVERY.body)  -- one stored by a notifier before this script's version
end
if outcome == 'delivered' then
  redis.call('HSET', dk, DELIVERY.state, 'delivered', DELIVERY.done, int(now))
  redis.call('HDEL', dk, DELIVERY.next)
  redis.call('ZREM', due, id)
  redis.call('EXPIRE', dk, delivered_ttl)
  release()
else
  redis.call('HINCRBY', dk, DELIVERY.fails, 1)
  if client_error == '1' then redis.call('HINCRBY', dk, DELIVERY.cerr, 1) end
  if outcome == 'retry' then
    local at = now + retry_ms
    redis.call('HSET', dk, DELIVERY.next, int(at))
    redis.call('ZADD', due, at, id)
  else
    redis.call('HSET', dk, DELIVERY.state, 'dead', DELIVERY.done, int(now))
    redis.call('HDEL', dk, DELIVERY.next)
    redis.call('ZREM', due, id)
    redis.call('LPUSH', dead, id)
    redis.call('LTRIM', dead, 0, DEAD_CAP - 1)
    redis.call('EXPIRE', dk, dead_ttl)
    release()
    -- ids whose record expired leave from the tail: the list counts records that exist
    drop_expired_dead(dead, string.sub(dk, 1, #dk - #id), 16)
  end
end
return reply{status = 'ok'}
