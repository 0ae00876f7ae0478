-- feed: checkpoint a chunk of lines before their jobs are submitted.
-- KEYS[1] bulk hash   KEYS[2] pending hash (index -> job id)   KEYS[3] output hash
-- ARGV (FEED in sluice/bulk/signatures.py): token, cursor (expected), new_cursor
--   (after this chunk), n_jobs, cost (the chunk's estimated cost); then groups
--   {index, value}: n_jobs of them a line index and its job id, then lines that
--   failed when parsed or estimated: index and output line (final now).
-- Refused, changing nothing, unless this token holds the lease, the bulk job is
-- running and the cursor is where this coordinator left it (no line is fed twice).
-- Returns 'ok' | 'lost' | 'stopped' | 'stale'.
local bulk, pending, output = KEYS[1], KEYS[2], KEYS[3]
local f = redis.call('HMGET', bulk, BULK.token, BULK.state, BULK.cursor)
if f[1] ~= token then return 'lost' end
if f[2] ~= 'running' then return 'stopped' end
if (f[3] or '0') ~= cursor then return 'stale' end
local pairs_ = {}
for i = 1, n_jobs do
  local g = arg_group(i)
  table.insert(pairs_, g.index)
  table.insert(pairs_, g.value)
end
if #pairs_ > 0 then call_chunked('HSET', pending, pairs_, 1000) end
local failed = 0
for i = n_jobs + 1, N_GROUPS do
  local g = arg_group(i)
  failed = failed + redis.call('HSETNX', output, g.index, g.value)
end
if failed > 0 then redis.call('HINCRBY', bulk, BULK.failed, failed) end
redis.call('HINCRBY', bulk, BULK.fed_cost, cost)
redis.call('HINCRBY', bulk, BULK.fed_jobs, n_jobs)
redis.call('HSET', bulk, BULK.cursor, new_cursor)
return 'ok'
