-- finish: end a bulk job (completed, cancelled or failed) and start its TTL.
-- KEYS[1] bulk hash   KEYS[2] active zset   KEYS[3] backlog hash
-- KEYS[4] input list  KEYS[5] output hash   KEYS[6] pending hash
-- ARGV[1] token; '*' = the reaper failing a bulk job whose coordinators keep dying
--   (no lease needed: the last one lapsed)
-- ARGV[2] final state   ARGV[3] TTL s   ARGV[4] bulk id   ARGV[5] error JSON ('' = none)
-- Returns {'ok', previous state} | {'lost', state} | {'missing', ''} | {'refused', state}.
local bulk = KEYS[1]
local f = redis.call('HMGET', bulk, 'state', 'token')
local state, holder = f[1], f[2]
if not state then return {'missing', ''} end
if state == 'completed' or state == 'cancelled' or state == 'failed' then
  return {'refused', state}
end
if ARGV[1] ~= '*' and holder ~= ARGV[1] then
  return {'lost', state}
end
local now = now_ms()
redis.call('HSET', bulk, 'state', ARGV[2], 'finished', int(now), 'token', '')
if ARGV[5] ~= '' then redis.call('HSET', bulk, 'error', ARGV[5]) end
redis.call('ZREM', KEYS[2], ARGV[4])
redis.call('HDEL', KEYS[3], ARGV[4])
local ttl = tonumber(ARGV[3])
for k = 1, 6 do
  if k == 1 or k > 3 then redis.call('EXPIRE', KEYS[k], ttl) end
end
return {'ok', state}
