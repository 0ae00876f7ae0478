-- step: one generative worker's decode step (ADR 0144, ADR 0146).
-- KEYS[1] in-flight zset (score = lease expiry ms)   KEYS[2] stats hash
-- KEYS[3] dead-letter list   KEYS[4] per-owner unfinished-job counts
-- ARGV: declared by name in sluice/generate/signatures.py (STEP): the fixed values,
--   then one group per write (arg_group(i): id, att, kind, start, idx, ids, text,
--   payload, ntok), an Append's 'tokens' groups before the 'end' / 'error' ones.
-- Derived keys: jprefix..id, sprefix..id (the job's token stream), tprefix..window
--   (same hash tag).
-- A 'tokens' group (one active sequence, every step, news or not) holds only while
-- its job is running under this worker at this attempt: then its START/RESTART and
-- TOKENS entries are added and its lease renewed (like renew.lua); otherwise the id
-- is replied as lost and nothing is written (a cancelled job's stream gets one
-- 'error' entry, if it has no terminal entry yet, so a follower ends). A job past
-- its deadline or running longer than max_run_ms (0: no limit) is ended here, like
-- the renew script ends it (ADR 0154): 'expired' or failed as RUN_TIME_EXCEEDED, an
-- 'error' entry saying which, and its id replied lost so the worker aborts it. A step
-- re-sent after its reply was lost writes no START/RESTART and no tokens entry a
-- second time for the same attempt (JOB.gen_next keeps the last one written).
-- An 'end' group is written while the job is not terminal: exactly when the
-- complete call that follows accepts its 'ok' (complete.lua's first-result rule).
-- An 'error' group is written while this worker holds the job: when complete
-- accepts its 'fail'.
-- Time to first token (enq to the first output token, server clock) is kept once
-- per job (JOB.ttft, HSETNX) and counted in the window's histogram (the wait
-- histogram's layout, sluice/records.py); every 'end' adds to the learned output
-- length (STAT.gen_finished, STAT.gen_output_tokens).
-- Replies (declared in STEP): now, then the lost ids.
local inflight, stats = KEYS[1], KEYS[2]
local ks = {inflight = inflight, stats = stats, dead = KEYS[3], owners = KEYS[4],
            result_ttl = result_ttl, dead_ttl = dead_ttl}
local ended = {}
local now = now_ms()
local expiry = now + lease_ms
local out = reply{now = now}
local bounds = WAIT_BOUNDS_MS
local ttft_hist, firsts, finished, out_tokens = {}, 0, 0, 0

local function add(sk, fields)
  redis.call('XADD', sk, 'MAXLEN', '~', maxlen, '*', unpack(fields))
end

local function first_token(jk, enq)
  local ttft = now - (tonumber(enq) or now)
  if redis.call('HSETNX', jk, JOB.ttft, int(ttft)) == 1 then
    local slot = #bounds + 1
    for k, bound in ipairs(bounds) do if ttft <= bound then slot = k; break end end
    ttft_hist[slot] = (ttft_hist[slot] or 0) + 1
    firsts = firsts + 1
  end
end

-- A job ended under this run: one error entry, unless the stream has ended.
local function stopped(sk, att, why, message)
  local last = redis.call('XREVRANGE', sk, '+', '-', 'COUNT', 1)
  if #last > 0 then
    local f = last[1][2]
    for k = 1, #f, 2 do
      if f[k] == STREAM.type and (f[k + 1] == STREAM_EVENT['end'] or
                                  f[k + 1] == STREAM_EVENT.error) then return end
    end
  end
  add(sk, {STREAM.type, STREAM_EVENT.error, STREAM.attempt, att,
           STREAM.error, cjson.encode({type = why, message = message})})
  redis.call('EXPIRE', sk, result_ttl)
end

-- What this attempt has written (JOB.gen_next, "att:pos"): nil, nothing yet (not
-- even its START); else the position of its last tokens entry (-1: none yet).
local function written(jk, att)
  local v = redis.call('HGET', jk, JOB.gen_next)
  if not v then return nil end
  local a, pos = string.match(v, '^(%d+):(%-?%d+)$')
  if tonumber(a) ~= att then return nil end
  return tonumber(pos)
end

-- A tokens entry's position (sluice.generate.stream.entry_position): entries of
-- one run in order have rising positions; a re-sent one is not above the last.
local function position(g)
  return 2 * (g.idx + g.ntok) + (g.ntok == 0 and 1 or 0)
end

-- A step re-sent after a lost reply holds writes already made: each is skipped
-- (the lease is still renewed), so a follower never reads them twice.
local function tokens(g, jk, sk, enq)
  local last = written(jk, g.att)
  if g.start == 1 and last == nil then
    local event = g.att > 1 and STREAM_EVENT.restart or STREAM_EVENT.start
    add(sk, {STREAM.type, event, STREAM.attempt, g.att})
    last = -1
    redis.call('HSET', jk, JOB.gen_next, int(g.att) .. ':-1')
  end
  if (g.ids ~= '[]' or g.text ~= '') and position(g) > (last or -1) then
    add(sk, {STREAM.type, STREAM_EVENT.tokens, STREAM.attempt, g.att, STREAM.index, g.idx,
             STREAM.ids, g.ids, STREAM.text, g.text})
    redis.call('HSET', jk, JOB.gen_next, int(g.att) .. ':' .. int(position(g)))
    if g.idx == 0 and g.ids ~= '[]' then first_token(jk, enq) end
  end
  redis.call('ZADD', inflight, 'XX', expiry, g.id)
end

local function write(g, jk, sk, enq)
  if g.kind == 'tokens' then
    tokens(g, jk, sk, enq)
  elseif g.kind == 'end' then
    add(sk, {STREAM.type, STREAM_EVENT['end'], STREAM.attempt, g.att, STREAM.result, g.payload})
    finished, out_tokens = finished + 1, out_tokens + g.ntok
  else
    add(sk, {STREAM.type, STREAM_EVENT.error, STREAM.attempt, g.att, STREAM.error, g.payload})
  end
  redis.call('EXPIRE', sk, result_ttl)
end

for i = 1, N_GROUPS do
  local g = arg_group(i)
  local jk, sk = jprefix .. g.id, sprefix .. g.id
  local f = redis.call('HMGET', jk, JOB.status, JOB.worker, JOB.att, JOB.enq, JOB.dl, JOB.start)
  local status, this_run = f[1], tonumber(f[3]) == g.att
  local ok
  if g.kind == 'end' then
    ok = status and not TERMINAL[status]
  else
    ok = status == 'running' and f[2] == worker and this_run
  end
  -- An 'end' too: its result is refused (complete.lua would refuse it as well).
  local why = ok and g.kind ~= 'error' and over_limit(f[5], f[6], now, max_run_ms)
  if why then
    end_over_limit(jk, g.id, why, ks, now, max_run_ms, ended)
    stopped(sk, g.att, why, why == 'expired' and 'the job passed its deadline while it ran'
            or 'the job ran longer than limits.max_run_ms')
    if g.kind == 'tokens' then reply_group(out, {lost = g.id}) end
  elseif ok then
    write(g, jk, sk, f[4])
  elseif g.kind == 'tokens' then
    if status == 'cancelled' and this_run then stopped(sk, g.att, 'cancelled', 'the job was cancelled') end
    reply_group(out, {lost = g.id})
  end
end

if firsts > 0 then
  local hkey = tprefix .. int(math.floor(now / WAIT_WINDOW_MS) * WAIT_WINDOW_MS / 1000)
  for slot, count in pairs(ttft_hist) do
    redis.call('HINCRBY', hkey, bounds[slot] and int(bounds[slot]) or WAIT_OVER, count)
  end
  redis.call('HINCRBY', hkey, WAIT_COUNT, firsts)
  redis.call('EXPIRE', hkey, WAIT_HIST_TTL_S)
end
if finished > 0 then
  redis.call('HINCRBY', stats, STAT.gen_finished, finished)
  redis.call('HINCRBY', stats, STAT.gen_output_tokens, out_tokens)
end
publish_ended(channel, ended, jprefix, nprefix)
return out
