-- lease: take, renew or give up a bulk job's coordinator lease.
-- KEYS[1] bulk hash   KEYS[2] the model's active-bulk zset
-- KEYS[3] input list   KEYS[4] output hash   KEYS[5] pending hash
-- ARGV[1] token   ARGV[2] lease ms   ARGV[3] bulk id   ARGV[4] take | renew | release
-- ARGV[6] the RQ job id of the slice taking it: a take by a slice other than the one
--   the bulk job names ('rq_job', set before each enqueue) is refused as 'superseded',
--   so a slice enqueued twice (a retry and a resume) never makes two chains of slices.
-- ARGV[5] TTL s: a take restarts the TTL of the bulk job's keys (set at upload), so a
--   bulk job that runs for longer than the TTL keeps its input.
-- take: refused ('held') while another token's lease is live; a queued bulk job
--   becomes running. renew: 'lost' unless this token holds the lease.
-- release: the lease ends now; the active entry keeps lease ms of grace for the
--   slice queued next, after which the reaper may resume the bulk job.
-- Returns {status, state}: status ok | held | lost | missing | ended | superseded.
local bulk, active = KEYS[1], KEYS[2]
local token, lease_ms, id, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local now = now_ms()
local f = redis.call('HMGET', bulk, 'state', 'token', 'lease')
local state, holder, until_ms = f[1], f[2], tonumber(f[3] or '0') or 0
if not state then return {'missing', ''} end
if state == 'completed' or state == 'cancelled' or state == 'failed' then
  return {'ended', state}
end
if mode == 'take' then
  local named = redis.call('HGET', bulk, 'rq_job')
  if ARGV[6] ~= '' and named and named ~= '' and named ~= ARGV[6] then
    return {'superseded', state}
  end
  if holder and holder ~= '' and holder ~= token and until_ms > now then
    return {'held', state}
  end
  if state == 'queued' then
    state = 'running'
    redis.call('HSET', bulk, 'state', state, 'started', int(now))
  end
  redis.call('HINCRBY', bulk, 'slices', 1)
  for k = 1, 5 do
    if k ~= 2 then redis.call('EXPIRE', KEYS[k], tonumber(ARGV[5])) end
  end
elseif holder ~= token then
  return {'lost', state}
end
if mode == 'release' then
  redis.call('HSET', bulk, 'token', '', 'lease', int(now))
else
  redis.call('HSET', bulk, 'token', token, 'lease', int(now + lease_ms))
end
redis.call('ZADD', active, now + lease_ms, id)
return {'ok', state}
