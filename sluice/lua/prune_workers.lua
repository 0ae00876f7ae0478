-- Forget workers whose heartbeat lapsed. Each id is checked again here, by the
-- Redis server's clock, at prune time: one that heartbeated after a reader saw
-- it lapsed (the read and the prune are separate round trips) is kept.
-- KEYS[1] the model's live workers (zset: id -> heartbeat expiry, epoch s, server clock)
-- KEYS[2] the model's worker info (hash: id -> WorkerInfo JSON)
-- KEYS[3] the model's live workers that claim nothing (zset, scored as KEYS[1])
-- ARGV (PRUNE_WORKERS in sluice/registry.py): groups {id}, the ids a reader saw lapsed
-- Returns how many were forgotten.
local t = redis.call('TIME')
local now_s = tonumber(t[1]) + tonumber(t[2]) / 1e6
local forgotten = 0
for i = 1, N_GROUPS do
  local id = arg_group(i).id
  local expiry = tonumber(redis.call('ZSCORE', KEYS[1], id))
  if expiry == nil or expiry <= now_s then
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[3], id)
    redis.call('HDEL', KEYS[2], id)
    forgotten = forgotten + 1
  end
end
return forgotten
