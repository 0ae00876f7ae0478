-- done: record one attempt of a webhook delivery and what comes next.
-- KEYS[1] the due zset   KEYS[2] the delivery hash   KEYS[3] the dead list
-- KEYS[4] the job's (or bulk job's) hash, held while the delivery is pending
-- ARGV[1] id   ARGV[2] lease token   ARGV[3] next: 'delivered' | 'retry' | 'dead'
-- ARGV[4] ms until the retry   ARGV[5] HTTP status (0: none: refused, timed out, ...)
-- ARGV[6] what went wrong ('' = nothing)   ARGV[7] the attempt's latency ms
-- ARGV[8] 1 when the attempt counts as a client error (a 4xx other than 410/429)
-- ARGV[9] TTL s of a delivered record   ARGV[10] TTL s of a given-up one
-- ARGV[11] attempts kept in the record's log
-- Only the lease's holder records (a notifier whose lease lapsed is 'stale').
-- A delivery that ends (delivered or given up) lets its job go: the job's own TTL
-- ('jttl', see hold_record in _common.lua) applies again, counted from now; the
-- record keeps its attempt log, never the body (a copy of the job's result).
-- Returns {'ok' | 'stale'}.
local due, dk, dead = KEYS[1], KEYS[2], KEYS[3]
local id, token, nxt = ARGV[1], ARGV[2], ARGV[3]
local f = redis.call('HMGET', dk, 'lease', 'state', 'log')
if f[1] ~= token or f[2] ~= 'pending' then return {'stale'} end
local now = now_ms()
local log = {}
if f[3] then
  local ok, parsed = pcall(cjson.decode, f[3])
  if ok and type(parsed) == 'table' then log = parsed end
end
table.insert(log, {at = now, status = tonumber(ARGV[5]), ms = tonumber(ARGV[7]),
                   error = ARGV[6]})
local keep = tonumber(ARGV[11])
while #log > keep do table.remove(log, 1) end
redis.call('HSET', dk, 'log', cjson.encode(log), 'last_status', ARGV[5], 'last_error', ARGV[6],
           'last_at', int(now))
redis.call('HDEL', dk, 'lease')
local function release()
  local own = redis.call('HGET', dk, 'jttl')
  -- Never longer than the job would have lived (a dead-lettered job's own TTL, days,
  -- outlasts its delivery: it keeps counting down).
  if own and redis.call('TTL', KEYS[4]) > tonumber(own) then
    redis.call('EXPIRE', KEYS[4], tonumber(own))
  end
  redis.call('HDEL', dk, 'body')  -- one stored by a notifier before this script's version
end
if nxt == 'delivered' then
  redis.call('HSET', dk, 'state', 'delivered', 'done', int(now))
  redis.call('HDEL', dk, 'next')
  redis.call('ZREM', due, id)
  redis.call('EXPIRE', dk, tonumber(ARGV[9]))
  release()
else
  redis.call('HINCRBY', dk, 'fails', 1)
  if ARGV[8] == '1' then redis.call('HINCRBY', dk, 'cerr', 1) end
  if nxt == 'retry' then
    local at = now + tonumber(ARGV[4])
    redis.call('HSET', dk, 'next', int(at))
    redis.call('ZADD', due, at, id)
  else
    redis.call('HSET', dk, 'state', 'dead', 'done', int(now))
    redis.call('HDEL', dk, 'next')
    redis.call('ZREM', due, id)
    redis.call('LPUSH', dead, id)
    redis.call('LTRIM', dead, 0, DEAD_CAP - 1)
    redis.call('EXPIRE', dk, tonumber(ARGV[10]))
    release()
    -- ids whose record expired leave from the tail: the list counts records that exist
    drop_expired_dead(dead, string.sub(dk, 1, #dk - #id), 16)
  end
end
return {'ok'}
