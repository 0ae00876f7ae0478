-- cancel: stop a bulk job. Queued (no coordinator yet): cancelled at once.
-- Running: marked 'cancelling'; its coordinator stops feeding, cancels the items
-- it has queued and ends it (a lapsed one is resumed by the reaper to do so).
-- KEYS[1] bulk hash   KEYS[2] active zset   KEYS[3] backlog hash
-- KEYS[4] input list  KEYS[5] output hash   KEYS[6] pending hash
-- ARGV[1] owner ('' = any)   ARGV[2] TTL s   ARGV[3] bulk id
-- Returns {'ok', previous state} | {'missing', ''} | {'refused', state}.
local bulk = KEYS[1]
local f = redis.call('HMGET', bulk, 'state', 'owner')
local state, owner = f[1], f[2] or ''
if not state or (ARGV[1] ~= '' and owner ~= ARGV[1]) then return {'missing', ''} end
if state == 'completed' or state == 'cancelled' or state == 'failed' then
  return {'refused', state}
end
if state == 'cancelling' then return {'ok', state} end
if state == 'running' then
  redis.call('HSET', bulk, 'state', 'cancelling')
  return {'ok', state}
end
end_bulk(KEYS, 'cancelled', ARGV[3], ARGV[2])
return {'ok', state}
