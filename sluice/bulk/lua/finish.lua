-- finish: end a bulk job (completed, cancelled or failed) and start its TTL.
-- KEYS[1] bulk hash   KEYS[2] active zset   KEYS[3] backlog hash
-- KEYS[4] input list  KEYS[5] output hash   KEYS[6] pending hash
-- ARGV (FINISH in sluice/bulk/signatures.py): token, state (the final one), ttl_s,
--   id (the bulk id), error_json ('' = none)
-- token '*': the reaper failing a bulk job whose coordinators keep dying (no lease
--   needed: the last one lapsed)
-- Returns {'ok', previous state} | {'lost', state} | {'missing', ''} | {'refused', state}.
local bulk = KEYS[1]
local f = redis.call('HMGET', bulk, BULK.state, BULK.token)
local was, holder = f[1], f[2]
if not was then return reply{status = 'missing', state = ''} end
if was == 'completed' or was == 'cancelled' or was == 'failed' then
  return reply{status = 'refused', state = was}
end
if token ~= '*' and holder ~= token then
  return reply{status = 'lost', state = was}
end
end_bulk(KEYS, state, id, ttl_s)
if error_json ~= '' then redis.call('HSET', bulk, BULK.error, error_json) end
return reply{status = 'ok', state = was}
