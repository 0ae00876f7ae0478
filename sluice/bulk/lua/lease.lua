-- lease: take, renew or give up a bulk job's coordinator lease.
-- KEYS[1] bulk hash   KEYS[2] the model's active-bulk zset
-- KEYS[3] input list   KEYS[4] output hash   KEYS[5] pending hash
-- ARGV (LEASE in sluice/bulk/signatures.py): token, lease_ms, id (the bulk id),
--   mode (take | renew | release), ttl_s, slice_id
-- slice_id: the RQ job id of the slice taking it: a take by a slice other than the one
--   the bulk job names ('rq_job', set before each enqueue) is refused as 'superseded',
--   so a slice enqueued twice (a retry and a resume) never makes two chains of slices.
-- ttl_s: a take restarts the TTL of the bulk job's keys (set at upload), so a
--   bulk job that runs for longer than the TTL keeps its input.
-- take: refused ('held') while another token's lease is live; a queued bulk job
--   becomes running. renew: 'lost' unless this token holds the lease.
-- release: the lease ends now; the active entry keeps lease ms of grace for the
--   slice queued next, after which the reaper may resume the bulk job.
-- Returns {status, state}: status ok | held | lost | missing | ended | superseded.
local bulk, active = KEYS[1], KEYS[2]
local now = now_ms()
local f = redis.call('HMGET', bulk, BULK.state, BULK.token, BULK.lease)
local state, holder, until_ms = f[1], f[2], tonumber(f[3] or '0') or 0
if not state then return reply{status = 'missing', state = ''} end
if state == 'completed' or state == 'cancelled' or state == 'failed' then
  return reply{status = 'ended', state = state}
end
if mode == 'take' then
  local named = redis.call('HGET', bulk, BULK.rq_job)
  if slice_id ~= '' and named and named ~= '' and named ~= slice_id then
    return reply{status = 'superseded', state = state}
  end
  if holder and holder ~= '' and holder ~= token and until_ms > now then
    return reply{status = 'held', state = state}
  end
  if state == 'queued' then
    state = 'running'
    redis.call('HSET', bulk, BULK.state, state, BULK.started, int(now))
  end
  redis.call('HINCRBY', bulk, BULK.slices, 1)
  for k = 1, 5 do
    if k ~= 2 then redis.call('EXPIRE', KEYS[k], ttl_s) end
  end
elseif holder ~= token then
  return reply{status = 'lost', state = state}
end
if mode == 'release' then
  redis.call('HSET', bulk, BULK.token, '', BULK.lease, int(now))
else
  redis.call('HSET', bulk, BULK.token, token, BULK.lease, int(now + lease_ms))
end
redis.call('ZADD', active, now + lease_ms, id)
return reply{status = 'ok', state = state}
