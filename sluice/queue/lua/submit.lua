-- submit: enqueue the jobs of one or many requests in one round trip. Each request is
-- all or none and gets the answer it would have got alone, as if the call's requests
-- had been sent one after another in order (a gateway coalesces the single-job
-- submits of one event-loop turn into one call, ADR 0161).
-- KEYS[1] stats hash            KEYS[2] sequence counter
-- KEYS[3] per-owner unfinished-job counts   KEYS[4] per-owner rate-limit state
-- KEYS[5] the fence: a bulk job's hash, whose BULK.token must equal fence_token (when not
--   ''), checked before anything is written: a bulk coordinator's jobs are created
--   only while it still holds the bulk job's lease (a paused one that wakes late
--   cannot recreate a job another coordinator already ran and gathered)
-- KEYS[6] the model's pause record: while it says so (PAUSE.refuse '1'), new jobs
--   are refused ('paused'; replays of existing ones still answer; ADR 0154)
-- KEYS[7..] the model's queue keys (every bucket), for the admission count
-- ARGV: declared by name in sluice/queue/signatures.py (SUBMIT): the fixed values
--   (read into locals by the generated prologue; `requests` lists each request's job
--   count, comma-separated, in order), then one group per job, the requests' jobs in
--   order (arg_fields(i): id, bucket, cost, prio rank 0 high .. 2 low, 3 bulk, input
--   JSON, meta JSON, deadline ms from now (0 = none), idem key ('' = none), webhook
--   url ('' = none) and its events (comma-separated), hash of the request body ('' =
--   none)). A job with a webhook keeps them
--   with its delivery TTL (hook_ttl s): the script that ends it enqueues the delivery.
-- Derived keys: jprefix..id, qprefix..bucket, iprefix..idempotency key,
--   wprefix..bucket (same hash tag).
-- Per bucket, pushes min(new jobs, 64) wake tokens onto wprefix..bucket in one
-- LPUSH (each list holds at most 64).
-- Rate limit: a token bucket per owner ("tokens:ms" in KEYS[4]), refilled at
-- rate/s up to burst; a request needs min(its new jobs, burst) tokens and takes
-- one per new job (a batch larger than the burst leaves a debt that later calls
-- wait out). Idempotent replays are free. Nothing is taken from a refused request.
-- A job id whose hash exists already (this call, retried) is returned as not created.
-- A replayed key whose job holds a request hash ('rqh') other than the job's is
-- refused before anything is written (a job from before hashes, or one without,
-- replays as it did).
-- What each request's admission reads (queued jobs and cost, the owner's count, its
-- tokens, the pause record) is read once per call and carried forward in locals
-- exactly as the earlier requests' writes would have changed it; the writes of
-- every admitted request are made after the last decision.
-- Replies (declared in SUBMIT): one group per request: state 'ok' (detail: now;
-- jobs: each job's id and created flag), or 'full' (detail: the reason; queued,
-- queued_cost), or 'limited' (detail: ms until enough tokens), or 'reused' (detail:
-- which of its jobs, 1-based), or 'paused' (the model is paused and refuses
-- submits), or 'fenced' (every request: nothing written).
local stats, seq = KEYS[1], KEYS[2]
local owners, rl = KEYS[3], KEYS[4]
local sizes, total = {}, 0
for s in string.gmatch(requests, '%d+') do
  sizes[#sizes + 1] = tonumber(s)
  total = total + sizes[#sizes]
end
if total ~= N_GROUPS then
  return redis.error_reply('submit: requests ' .. requests .. ' name ' .. total
                           .. ' jobs, ARGV holds ' .. N_GROUPS)
end
local out = {}
local function answer(state, detail, queued, queued_cost, jobs)
  jobs = jobs or {}
  reply_row(out, state, detail, queued, queued_cost, jobs)  -- no table per request: ADR 0177
end
if fence_token ~= '' and redis.call('HGET', KEYS[5], BULK.token) ~= fence_token then
  for _ = 1, #sizes do answer('fenced', '', 0, 0) end
  return out
end
local n = N_GROUPS
-- What the admission reads of each job, in arrays (no table per job: ADR 0177); the
-- rest is read again, by arg_fields, only for a job that is written.
local ids, idems, rqhs = {}, {}, {}
-- Each job's cost parsed once (cost, prio and deadline arrive as text: the hash stores
-- cost and prio as sent, and Lua parses a number with strtod). `+ 0` parses once;
-- tonumber parses twice (lua_isnumber, then lua_tonumber: ADR 0177). The client sends
-- an integer; anything else fails the script, as the sum it joins did before.
local costs_n = {}
for i = 1, n do
  local id, bucket, cost, prio, input, meta, deadline, idem, whu, whe, rqh = arg_fields(i)
  ids[i], idems[i], rqhs[i], costs_n[i] = id, idem, rqh, cost + 0
end
local BULK_PRIO = int(RANK.bulk)
local now = now_ms()

-- The same call run again (redis-py retries a script whose reply timed out or
-- whose connection dropped) must not queue a job twice or count it twice: ids are
-- made before the call, so a job hash already there is this call's. One EXISTS
-- over all the call's ids (the usual answer, 0, ends it); only when some exist is
-- each asked alone.
local found = 0
do
  local all = {}
  for i = 1, n do all[i] = jprefix .. ids[i] end
  for i = 1, n, 1000 do
    found = found + redis.call('EXISTS', unpack(all, i, math.min(i + 999, n)))
  end
end

-- What the admission of the next request sees (nil: not read yet).
local seen = {}
local made = {}  -- idempotency key -> {id, rqh} of a job an earlier request made
local existing = {}

-- The job the idempotency key of job i already names (false: none), and the request
-- hash that job holds when job i asks for a match.
local function lookup(i)
  local ikey, rqh = idems[i], rqhs[i]
  if ikey == '' then return false, nil end
  local m = made[ikey]
  if m then
    if rqh ~= '' and m.rqh ~= '' then return m.id, m.rqh end
    return m.id, nil
  end
  local id = redis.call('GET', iprefix .. ikey)
  -- A key whose job has expired (result TTL) is free again: a new job, not a 404.
  if id and redis.call('EXISTS', jprefix .. id) == 0 then id = false end
  if id and rqh ~= '' then return id, redis.call('HGET', jprefix .. id, JOB.rqh) end
  return id, nil
end

local function queued_now()
  if seen.queued == nil then
    local q = 0
    for k = 7, #KEYS do q = q + redis.call('ZCARD', KEYS[k]) end
    seen.queued = q
    seen.queued_cost = tonumber(redis.call('HGET', stats, STAT.queued_cost) or '0')
  end
  return seen.queued, seen.queued_cost
end

local function tokens_now()
  if seen.tokens == nil then
    seen.tokens = burst
    local state = redis.call('HGET', rl, owner)
    if state then
      local sep = string.find(state, ':', 1, true)
      local last = tonumber(string.sub(state, sep + 1))
      seen.tokens = tonumber(string.sub(state, 1, sep - 1)) + math.max(now - last, 0) * rate / 1000
    end
  end
  return math.min(burst, seen.tokens)
end

-- Admission of one request with new jobs: nil when admitted, else its refusal.
local function refusal(new_count, new_cost)
  if seen.paused == nil then seen.paused = redis.call('HGET', KEYS[6], PAUSE.refuse) == '1' end
  if seen.paused then return {'paused', '', 0, 0} end
  if max_jobs > 0 or max_cost > 0 then
    local queued, queued_cost = queued_now()
    if max_jobs > 0 and queued + new_count > max_jobs then
      return {'full', 'queue_jobs', queued, queued_cost}
    end
    if max_cost > 0 and queued_cost + new_cost > max_cost then
      return {'full', 'queue_cost', queued, queued_cost}
    end
  end
  if owner ~= '' and owner_max > 0 then
    if seen.mine == nil then seen.mine = tonumber(redis.call('HGET', owners, owner) or '0') end
    if seen.mine + new_count > owner_max then return {'full', 'owner_jobs', seen.mine, 0} end
  end
  if owner ~= '' and rate > 0 then
    local tokens, need = tokens_now(), math.min(new_count, burst)
    if tokens < need then return {'limited', math.ceil((need - tokens) * 1000 / rate), 0, 0} end
    -- Stored as alone: four decimals, read back by the next request at this `now`.
    seen.tokens = tonumber(string.format('%.4f', tokens - new_count))
    seen.rate_taken = true
  end
  return nil
end

-- Decide one request (jobs lo..hi): its refusal, or nil and what it adds.
local function decide(lo, hi)
  for i = lo, hi do
    local id, made_by = lookup(i)
    if id and made_by and made_by ~= rqhs[i] then return {'reused', i - lo + 1, 0, 0} end
    existing[i] = id
  end
  local new_count, new_cost = 0, 0
  for i = lo, hi do
    if found > 0 and not existing[i] and redis.call('EXISTS', jprefix .. ids[i]) == 1 then
      existing[i] = ids[i]
    end
    if not existing[i] then new_count, new_cost = new_count + 1, new_cost + costs_n[i] end
  end
  if new_count == 0 then return nil end
  local no = refusal(new_count, new_cost)
  if no then return no end
  if seen.queued ~= nil then
    seen.queued, seen.queued_cost = seen.queued + new_count, seen.queued_cost + new_cost
  end
  if seen.mine ~= nil then seen.mine = seen.mine + new_count end
  return nil
end

local admitted, refused, new_count, new_cost, bulk_cost = {}, {}, 0, 0, 0  -- bulk: enqueue
do
  local lo = 1
  for r = 1, #sizes do
    local hi = lo + sizes[r] - 1
    local no = decide(lo, hi)
    if no then
      refused[r] = no
      for i = lo, hi do existing[i] = nil end
    else
      admitted[r] = {lo, hi}
      for i = lo, hi do
        if not existing[i] then
          new_count, new_cost = new_count + 1, new_cost + costs_n[i]
          if idems[i] ~= '' then made[idems[i]] = {id = ids[i], rqh = rqhs[i]} end
        end
      end
    end
    lo = hi + 1
  end
end

if seen.rate_taken then
  redis.call('HSET', rl, owner, string.format('%.4f:%d', seen.tokens, now))
end
if new_count > 0 and owner ~= '' then redis.call('HINCRBY', owners, owner, new_count) end

local base = 0
if new_count > 0 then base = redis.call('INCRBY', seq, new_count) - new_count end
local zadds, costs, k = {}, {}, 0
local function opt(f, name, value) f[#f + 1] = name; f[#f + 1] = value end
local now_s = int(now)  -- formatted once, stored by every job
-- Job i, admitted and new: its hash, its queue entry (ZADD below), its cost counted.
local function enqueue(i, cost_n)
  local id, bucket, cost, prio, input, meta, deadline, idem, whu, whe, rqh = arg_fields(i)
  if prio == BULK_PRIO then bulk_cost = bulk_cost + cost_n end
  local rank = RANK_OF_TEXT[prio] or tonumber(prio)
  local after = deadline ~= '0' and tonumber(deadline) or 0  -- most jobs: '0'
  deadline = after > 0 and int(now + after) or '0'
  -- Score: priority class first, then arrival order (a per-model sequence).
  k = k + 1
  local score = int(rank * SCORE_SCALE + base + k)
  -- One HSET per job: the optional fields join the fixed ones only when set. An
  -- absent meta, idem or att reads as none (sluice/jobs.py), an absent dl as no
  -- deadline (over_limit, claim.lua): fewer fields to write, hold and read back.
  -- cost and prio are stored as sent (ARGV strings), not formatted again.
  if deadline == '0' and meta == '' and idem == '' and owner == '' and rqh == '' and whu == '' then
    -- The usual job: the fixed fields alone, sent without a table to unpack (ADR 0177).
    -- The same fields, in the same order, as the first line of `f` below.
    redis.call('HSET', jprefix .. id, JOB.id, id, JOB.bucket, bucket, JOB.cost, cost,
      JOB.prio, prio, JOB.status, 'queued', JOB.input, input, JOB.enq, now_s, JOB.score, score)
  else
    local f = {JOB.id, id, JOB.bucket, bucket, JOB.cost, cost, JOB.prio, prio,
      JOB.status, 'queued', JOB.input, input, JOB.enq, now_s, JOB.score, score}
    if deadline ~= '0' then opt(f, JOB.dl, deadline) end
    if meta ~= '' then opt(f, JOB.meta, meta) end
    if idem ~= '' then opt(f, JOB.idem, idem) end
    if owner ~= '' then opt(f, JOB.owner, owner) end
    if rqh ~= '' then opt(f, JOB.rqh, rqh) end
    if whu ~= '' then  -- events and TTL only when not the defaults (every event, HOOK_TTL_S)
      opt(f, JOB.whu, whu)
      if whe ~= '' then opt(f, JOB.whe, whe) end
      if hook_ttl ~= HOOK_TTL_S then opt(f, JOB.wht, hook_ttl) end
    end
    redis.call('HSET', jprefix .. id, unpack(f))
  end
  local za = zadds[bucket]
  if not za then za = {}; zadds[bucket], costs[bucket] = za, 0 end
  za[#za + 1] = score; za[#za + 1] = id
  costs[bucket] = costs[bucket] + cost_n
  if idem ~= '' then
    redis.call('SET', iprefix .. idem, id, 'EX', idem_ttl)
  end
end

for r = 1, #sizes do
  local span = admitted[r]
  if not span then
    local no = refused[r]
    answer(no[1], no[2], no[3], no[4])
  else
    local made_ids = {}
    for i = span[1], span[2] do
      if existing[i] then
        made_ids[#made_ids + 1] = existing[i]; made_ids[#made_ids + 1] = 0
      else
        enqueue(i, costs_n[i])
        made_ids[#made_ids + 1] = ids[i]; made_ids[#made_ids + 1] = 1
      end
    end
    answer('ok', now, 0, 0, made_ids)
  end
end
for bucket, za in pairs(zadds) do
  call_chunked('ZADD', qprefix .. bucket, za, 1000)
  redis.call('HINCRBY', stats, STAT_BUCKET_COST .. bucket, costs[bucket])
  wake(wprefix .. bucket, #za / 2)
end
if new_count > 0 then
  if new_cost > 0 then redis.call('HINCRBY', stats, STAT.queued_cost, new_cost) end
  redis.call('HINCRBY', stats, STAT.arrived, new_count)
  redis.call('HINCRBY', stats, STAT.arrived_cost, new_cost)
end
-- Bulk items (rank 3) are counted apart too: the autoscaler sizes for interactive
-- arrivals and lets bulk work only fill headroom (ADR 0090).
if bulk_cost > 0 then redis.call('HINCRBY', stats, STAT.bulk_arrived_cost, bulk_cost) end
return out
