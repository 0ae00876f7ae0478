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
end_bulk(KEYS, ARGV[2], ARGV[4], ARGV[3])
if ARGV[5] ~= '' then redis.call('HSET', bulk, 'error', ARGV[5]) end
return {'ok', state}
