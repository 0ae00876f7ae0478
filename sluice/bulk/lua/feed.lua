-- feed: checkpoint a chunk of lines before their jobs are submitted.
-- KEYS[1] bulk hash   KEYS[2] pending hash (index -> job id)   KEYS[3] output hash
-- ARGV[1] token   ARGV[2] cursor expected   ARGV[3] cursor after this chunk
-- ARGV[4] number of jobs N   ARGV[5] the chunk's estimated cost
-- then N pairs: line index, job id; then pairs: line index, output line (lines
--   that failed when parsed or estimated: their output is final now).
-- Refused, changing nothing, unless this token holds the lease, the bulk job is
-- running and the cursor is where this coordinator left it (no line is fed twice).
-- Returns 'ok' | 'lost' | 'stopped' | 'stale'.
local bulk, pending, output = KEYS[1], KEYS[2], KEYS[3]
local f = redis.call('HMGET', bulk, 'token', 'state', 'cursor')
if f[1] ~= ARGV[1] then return 'lost' end
if f[2] ~= 'running' then return 'stopped' end
if (f[3] or '0') ~= ARGV[2] then return 'stale' end
local n = tonumber(ARGV[4])
local P = 6  -- ARGV index of the first pair
local pairs_ = {}
for i = P, P + 2 * n - 1 do table.insert(pairs_, ARGV[i]) end
if #pairs_ > 0 then call_chunked('HSET', pending, pairs_, 1000) end
local failed = 0
for i = P + 2 * n, #ARGV, 2 do
  failed = failed + redis.call('HSETNX', output, ARGV[i], ARGV[i + 1])
end
if failed > 0 then redis.call('HINCRBY', bulk, 'failed', failed) end
redis.call('HINCRBY', bulk, 'fed_cost', tonumber(ARGV[5]))
redis.call('HINCRBY', bulk, 'fed_jobs', n)
redis.call('HSET', bulk, 'cursor', ARGV[3])
return 'ok'
