-- step: one generative worker's decode step (ADR 0144, ADR 0146).
-- KEYS[1] in-flight zset (score = lease expiry ms)   KEYS[2] stats hash
-- ARGV: declared by name in sluice/generate/signatures.py (STEP): the fixed values,
--   then one group per write (arg_group(i): id, att, kind, start, idx, ids, text,
--   payload, ntok), an Append's 'tokens' groups before the 'end' / 'error' ones.
-- Derived keys: jprefix..id, sprefix..id (the job's token stream), tprefix..window
--   (same hash tag).
-- A 'tokens' group (one active sequence, every step, news or not) holds only while
-- its job is running under this worker at this attempt: then its START/RESTART and
-- TOKENS entries are added and its lease renewed (like renew.lua); otherwise the id
-- is replied as lost and nothing is written (a cancelled job's stream gets one
-- 'error' entry, if it has no terminal entry yet, so a follower ends).
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

-- A job cancelled under this run: one error entry, unless the stream has ended.
local function cancelled(sk, att)
  local last = redis.call('XREVRANGE', sk, '+', '-', 'COUNT', 1)
  if #last > 0 then
    local f = last[1][2]
    for k = 1, #f, 2 do
      if f[k] == STREAM.type and (f[k + 1] == STREAM_EVENT['end'] or
                                  f[k + 1] == STREAM_EVENT.error) then return end
    end
  end
  add(sk, {STREAM.type, STREAM_EVENT.error, STREAM.attempt, att,
           STREAM.error, cjson.encode({type = 'cancelled', message = 'the job was cancelled'})})
  redis.call('EXPIRE', sk, result_ttl)
end

local function write(g, jk, sk, enq)
  if g.start == 1 then
    local event = g.att > 1 and STREAM_EVENT.restart or STREAM_EVENT.start
    add(sk, {STREAM.type, event, STREAM.attempt, g.att})
  end
  if g.kind == 'tokens' then
    if g.ids ~= '[]' or g.text ~= '' then
      add(sk, {STREAM.type, STREAM_EVENT.tokens, STREAM.attempt, g.att, STREAM.index, g.idx,
               STREAM.ids, g.ids, STREAM.text, g.text})
      if g.idx == 0 and g.ids ~= '[]' then first_token(jk, enq) end
    end
    redis.call('ZADD', inflight, 'XX', expiry, g.id)
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
  local f = redis.call('HMGET', jk, JOB.status, JOB.worker, JOB.att, JOB.enq)
  local status, this_run = f[1], tonumber(f[3]) == g.att
  local ok
  if g.kind == 'end' then
    ok = status and not TERMINAL[status]
  else
    ok = status == 'running' and f[2] == worker and this_run
  end
  if ok then
    write(g, jk, sk, f[4])
  elseif g.kind == 'tokens' then
    if status == 'cancelled' and this_run then cancelled(sk, g.att) end
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
return out
