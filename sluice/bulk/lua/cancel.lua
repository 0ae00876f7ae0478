-- cancel: stop a bulk job. Queued (no coordinator yet): cancelled at once.
-- Running: marked 'cancelling'; its coordinator stops feeding, cancels the items
-- it has queued and ends it (a lapsed one is resumed by the reaper to do so).
-- KEYS[1] bulk hash   KEYS[2] active zset   KEYS[3] backlog hash
-- KEYS[4] input list  KEYS[5] output hash   KEYS[6] pending hash
-- ARGV (CANCEL in sluice/bulk/signatures.py): owner ('' = any), ttl_s, id (the bulk id)
-- Returns {'ok', previous state} | {'missing', ''} | {'refused', state}.
local bulk = KEYS[1]
local f = redis.call('HMGET', bulk, BULK.state, BULK.owner)
local state, holder = f[1], f[2] or ''
if not state or (owner ~= '' and holder ~= owner) then
  return reply{status = 'missing', state = ''}
end
if state == 'completed' or state == 'cancelled' or state == 'failed' then
  return reply{status = 'refused', state = state}
end
if state == 'cancelling' then return reply{status = 'ok', state = state} end
if state == 'running' then
  redis.call('HSET', bulk, BULK.state, 'cancelling')
  return reply{status = 'ok', state = state}
end
end_bulk(KEYS, 'cancelled', id, ttl_s)
return reply{status = 'ok', state = state}
