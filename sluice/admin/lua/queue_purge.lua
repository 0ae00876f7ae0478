-- queue_purge: cancel one chunk of a model's queued jobs (docs/adr/0153).
-- KEYS[1] stats hash   KEYS[2] per-owner unfinished-job counts
-- KEYS[3] retries waiting out their backoff (zset, due ms)   KEYS[4] one bucket's queue
-- ARGV: declared in sluice/admin/signatures.py (QUEUE_PURGE). mode 'queue': the
--   first `limit` entries of KEYS[4] scored in [lo, hi] (one priority class, up to
--   the sequence number the purge began at, so jobs submitted since are kept);
--   mode 'retry': `limit` entries of KEYS[3] from `offset`, those of `bucket` (''
--   any) and priority rank `prio` (-1 any).
-- Derived keys: jprefix..id, nprefix.. (webhook deliveries, the event stream).
-- Each queued job ends 'cancelled' exactly as a cancel ends it (cancel.lua): its
-- costs and owner count released, its input dropped, and publish_ended tells every
-- long-poll, SSE stream and webhook. An entry whose job is not queued (taken by a
-- claim, ended by a late result) is only removed from the zset.
-- Replies (declared): scanned, acted (cancelled), removed (entries taken out).
local stats, owners, retries, queue = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_ms()
local ids
if mode == 'queue' then
  ids = redis.call('ZRANGEBYSCORE', queue, lo, hi, 'LIMIT', 0, limit)
else
  ids = redis.call('ZRANGE', retries, offset, offset + limit - 1)
end
local ended, rem = {}, {}

local function wanted(f)
  if mode == 'queue' then return true end
  if bucket ~= '' and f[2] ~= bucket then return false end
  return prio < 0 or tonumber(f[5]) == prio
end

for _, id in ipairs(ids) do
  local jk = jprefix .. id
  local f = redis.call('HMGET', jk, JOB.status, JOB.bucket, JOB.cost, JOB.owner, JOB.prio)
  if f[1] ~= 'queued' then
    table.insert(rem, id)
  elseif wanted(f) then
    table.insert(rem, id)
    drop_cost(stats, f[2], tonumber(f[3]) or 0)
    release_owner(owners, f[4])
    redis.call('HSET', jk, JOB.status, 'cancelled', JOB.fin, int(now))
    redis.call('HDEL', jk, JOB.worker, JOB.input, JOB.retry_at)
    redis.call('EXPIRE', jk, result_ttl)
    table.insert(ended, id)
  end
end
if #rem > 0 then
  call_chunked('ZREM', queue, rem, 1000)
  call_chunked('ZREM', retries, rem, 1000)
end
if #ended > 0 then redis.call('HINCRBY', stats, STAT.cancelled, #ended) end
publish_ended(channel, ended, jprefix, nprefix)
return reply{scanned = #ids, acted = #ended, removed = #rem}
