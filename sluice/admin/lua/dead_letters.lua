-- dead_letters: act on one chunk of a model's dead letters (docs/adr/0153).
-- KEYS[1] dead-letter list   KEYS[2] stats hash   KEYS[3] per-owner unfinished-job counts
-- ARGV: declared in sluice/admin/signatures.py (DEAD_LETTERS): action 'redrive' (back
--   to its queue in its original place, attempts reset, the same id) or 'purge'
--   (the record deleted); one group per id (a chunk: the caller sends 500 a call).
-- Derived keys: jprefix..id, qprefix..bucket, wprefix..bucket, sprefix..id (a
--   generative job's token stream, restarted by a redrive) (same hash tag).
-- Only a record whose status is 'failed' is acted on; an id whose record is
-- anything else (expired, or redriven by another call) just leaves the list. The
-- list keeps its order; it is at most DEAD_CAP (10,000) long, so rewriting it
-- without the chunk's ids costs one O(10,000) pass per call.
-- A redriven job is unfinished again: it counts against its owner's cap, its
-- record loses its TTL, its error and times and its deadline (long past, most
-- likely: the operator asks for it to run), and it pushes a wake token.
-- Replies (declared): scanned, acted; one group per job acted on: id.
local dead, stats, owners = KEYS[1], KEYS[2], KEYS[3]
local ids, gone = {}, {}
for i = 1, N_GROUPS do ids[i] = arg_group(i).id end
local out = reply{scanned = #ids, acted = 0}
local acted = 0

local function redrive(jk, id, f)
  redis.call('HSET', jk, JOB.status, 'queued', JOB.att, '0', JOB.dl, '0')
  redis.call('HDEL', jk, JOB.error, JOB.fin, JOB.start, JOB.worker, JOB.run_ms,
             JOB.retry_at, JOB.gen_next, JOB.ttft)
  redis.call('PERSIST', jk)
  redis.call('DEL', sprefix .. id)
  redis.call('ZADD', qprefix .. f[2], f[3], id)
  add_cost(stats, f[2], tonumber(f[4]) or 0)
  if f[5] and f[5] ~= '' then redis.call('HINCRBY', owners, f[5], 1) end
  wake(wprefix .. f[2], 1)
end

for _, id in ipairs(ids) do
  local jk = jprefix .. id
  local f = redis.call('HMGET', jk, JOB.status, JOB.bucket, JOB.score, JOB.cost, JOB.owner,
                       JOB.input)
  gone[id] = true
  if f[1] == 'failed' then
    if action == 'redrive' and f[2] and tonumber(f[3]) and f[6] then
      redrive(jk, id, f)
      acted = acted + 1
      reply_group(out, {id = id})
    elseif action == 'purge' then
      redis.call('UNLINK', jk, sprefix .. id)
      acted = acted + 1
      reply_group(out, {id = id})
    else
      gone[id] = nil  -- unusable for a redrive (no input kept): it stays a dead letter
    end
  end
end

if #ids > 0 then
  local all, keep = redis.call('LRANGE', dead, 0, -1), {}
  for _, id in ipairs(all) do if not gone[id] then table.insert(keep, id) end end
  if #keep < #all then
    redis.call('DEL', dead)
    if #keep > 0 then call_chunked('RPUSH', dead, keep, 1000) end
  end
end
if action == 'redrive' and acted > 0 then redis.call('HINCRBY', stats, STAT.redriven, acted) end
out[REPLY.acted] = acted
return out
