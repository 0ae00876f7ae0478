-- complete: record the outcome of every job of a batch in one round trip.
-- KEYS[1] in-flight zset    KEYS[2] stats hash    KEYS[3] dead-letter list
-- KEYS[4] per-owner unfinished-job counts   KEYS[5] workers running a bulk batch
-- KEYS[6] retries waiting out their backoff (zset, due ms; docs/adr/0153)
-- ARGV: declared by name in sluice/queue/signatures.py (COMPLETE): the fixed values,
--   then one group per outcome (arg_fields(i): id, kind 'ok' | 'retry' | 'fail' |
--   'release', payload (result or error JSON), run_ms).
-- Derived keys: jprefix..id, qprefix..bucket, wprefix..bucket, eprefix..window
--   (same hash tag).
-- The first result of a job wins: a job already ended (or cancelled) is left as
-- it is and counted stale, so a late worker can never overwrite a result. A retry,
-- fail or release from a worker that no longer holds the job (its lease lapsed and
-- another worker took it) is stale too: only the holder may give a job back.
-- 'release' hands back a job that never ran: requeued, the claim's attempt undone.
-- Any other outcome of a job past its deadline, or that ran longer than max_run_ms
-- (0: no limit) since its claim, is refused: the job ends 'expired', or failed as
-- RUN_TIME_EXCEEDED (ADR 0154), counted accepted (the renewal usually ended it first).
-- A released job goes straight back and pushes a wake token onto its bucket's list;
-- a retried one waits out its backoff in KEYS[6] first (retry_or_dead).
-- Each succeeded job's end-to-end latency (enqueue to now) is counted in the
-- 10 s window's histogram, with the claim script's queue-wait bounds.
-- Replies (declared in COMPLETE): accepted, stale.
local inflight, stats, dead, owners = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ks = {inflight = inflight, stats = stats, dead = dead, owners = owners,
            result_ttl = result_ttl, dead_ttl = dead_ttl}
local rt = {key = KEYS[6], base = backoff_ms, cap = backoff_max_ms}
local now = now_ms()
local now_s = int(now)  -- formatted once: every succeeded job stores it
-- The TTL as text, once: a Lua number passed to redis.call is formatted (%.17g) per call.
local result_ttl_s = int(result_ttl)
local ended, accepted, stale = {}, 0, 0
local done_cost, done_ids = 0, {}
-- Same layout as claim.lua's queue-wait histogram (sluice/records.py).
local bounds = WAIT_BOUNDS_MS
local e2e_hist = {}
-- What the loop reads of each job, named once per call (not per job): first what a
-- result needs (1..6: status, cost, owner, enq, webhook url, deadline); then, only for
-- a job that needs more (another outcome, a requeued job, a webhook, a run limit),
-- the rest (7..11: bucket, worker, webhook events and delivery TTL, claim time) in a
-- second read. The usual result reads six fields, not eleven: every field read is
-- looked up, sent back and built into a Lua table. publish_known needs no third read.
local READ = {JOB.status, JOB.cost, JOB.owner, JOB.enq, JOB.whu, JOB.dl}
local MORE = {JOB.bucket, JOB.worker, JOB.whe, JOB.wht, JOB.start}
local S_STATUS, S_RESULT, S_FIN, S_RUN_MS, S_WORKER, S_INPUT =
  JOB.status, JOB.result, JOB.fin, JOB.run_ms, JOB.worker, JOB.input
local n_bounds = #bounds

for i = 1, N_GROUPS do
  local id, kind, payload, run_ms = arg_fields(i)  -- no table per outcome (ADR 0177)
  local jk = jprefix .. id
  local f = redis.call('HMGET', jk, unpack(READ))
  local status = f[1]
  if status and (kind ~= 'ok' or status == 'queued' or f[5] or max_run_ms > 0) then
    local g = redis.call('HMGET', jk, unpack(MORE))
    f[7], f[8], f[9], f[10], f[11] = g[1], g[2], g[3], g[4], g[5]
  end
  local not_holder = kind ~= 'ok' and reporter ~= '' and f[8] ~= reporter
  if (not status) or TERMINAL[status] or (status == 'queued' and kind ~= 'ok') or not_holder then
    stale = stale + 1
  elseif kind == 'release' then
    accepted = accepted + 1
    local g = redis.call('HMGET', jk, JOB.score)
    redis.call('ZREM', inflight, id)
    redis.call('HINCRBY', jk, JOB.att, -1)
    redis.call('HSET', jk, JOB.status, 'queued')
    redis.call('HDEL', jk, JOB.worker, JOB.start, JOB.left_at)  -- left afresh (ADR 0166)
    redis.call('ZADD', qprefix .. f[7], g[1], id)
    add_cost(stats, f[7], tonumber(f[2]))
    wake(wprefix .. f[7], 1)
  else
    accepted = accepted + 1
    if status == 'queued' then
      -- The lease had lapsed and the job was requeued, but this result is good.
      redis.call('ZREM', qprefix .. f[7], id)
      redis.call('ZREM', rt.key, id)
      drop_cost(stats, f[7], tonumber(f[2]))
    end
    local why = over_limit(f[6], f[11], now, max_run_ms)
    if why then
      end_over_limit(jk, id, why, ks, now, max_run_ms, {})  -- published below, fields known
      local ended_as = why == 'expired' and 'expired' or 'failed'
      table.insert(ended, {id, ended_as, f[5], f[9], f[3], f[10]})
    elseif kind == 'ok' then
      done_ids[#done_ids + 1] = id
      if f[3] then release_owner(owners, f[3]) end
      -- worker and input emptied in the same HSET (no HDEL): both read as absent
      -- (sluice/jobs.py), and the input's bytes are freed all the same.
      redis.call('HSET', jk, S_STATUS, 'succeeded', S_RESULT, payload, S_FIN, now_s,
                 S_RUN_MS, run_ms, S_WORKER, '', S_INPUT, '')
      redis.call('EXPIRE', jk, result_ttl_s)
      done_cost = done_cost + f[2]  -- parsed once (tonumber parses twice: ADR 0177)
      local e2e, slot = now - (tonumber(f[4]) or now), n_bounds + 1
      for k = 1, n_bounds do if e2e <= bounds[k] then slot = k; break end end
      e2e_hist[slot] = (e2e_hist[slot] or 0) + 1
      ended[#ended + 1] = {id, 'succeeded', f[5], f[9], f[3], f[10]}
    elseif kind == 'retry' then
      if retry_or_dead(jk, id, inflight, stats, dead, qprefix, payload, now, max_attempts, dead_ttl,
                       wprefix, owners, rt) then
        table.insert(ended, {id, 'failed', f[5], f[9], f[3], f[10]})
      end
    else
      redis.call('ZREM', inflight, id)
      redis.call('HSET', jk, JOB.run_ms, run_ms)
      dead_letter(jk, id, stats, dead, payload, now, dead_ttl, owners)
      table.insert(ended, {id, 'failed', f[5], f[9], f[3], f[10]})
    end
  end
end
if #done_ids > 0 then
  call_chunked('ZREM', inflight, done_ids, 1000)
  redis.call('HINCRBY', stats, STAT.succeeded, #done_ids)
end
if done_cost > 0 then redis.call('HINCRBY', stats, STAT.completed_cost, done_cost) end
if #done_ids > 0 then
  local hkey = eprefix .. int(math.floor(now / WAIT_WINDOW_MS) * WAIT_WINDOW_MS / 1000)
  for slot, count in pairs(e2e_hist) do
    redis.call('HINCRBY', hkey, bounds[slot] and int(bounds[slot]) or WAIT_OVER, count)
  end
  -- The window's TTL is set once, by the write that creates it.
  if redis.call('HINCRBY', hkey, WAIT_COUNT, #done_ids) == #done_ids then
    redis.call('EXPIRE', hkey, WAIT_HIST_TTL_S)
  end
end
publish_known(channel, ended, jprefix, nprefix)
-- The reporting worker's batch is over: it holds no bulk batch now (last: a write
-- before the first memory-taking one would let this script run past maxmemory).
if reporter ~= '' then redis.call('ZREM', KEYS[5], reporter) end
return reply{accepted = accepted, stale = stale}
