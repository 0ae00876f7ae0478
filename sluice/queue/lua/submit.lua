-- submit: enqueue one or many jobs in one round trip (all or none).
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
--   (read into locals by the generated prologue), then one group per job
--   (arg_group(i): id, bucket, cost, prio rank 0 high .. 2 low, 3 bulk, input JSON,
--   meta JSON, deadline ms from now (0 = none), idem key ('' = none), webhook url
--   ('' = none) and its events (comma-separated), hash of the request body ('' =
--   none)). A job with a webhook keeps them
--   with its delivery TTL (hook_ttl s): the script that ends it enqueues the delivery.
-- Derived keys: jprefix..id, qprefix..bucket, iprefix..idempotency key,
--   wprefix..bucket (same hash tag).
-- Per bucket, pushes min(new jobs, 64) wake tokens onto wprefix..bucket in one
-- LPUSH (each list holds at most 64).
-- Rate limit: a token bucket per owner ("tokens:ms" in KEYS[4]), refilled at
-- rate/s up to burst; a call needs min(new jobs, burst) tokens and takes
-- one per new job (a batch larger than the burst leaves a debt that later calls
-- wait out). Idempotent replays are free. Nothing is taken from a refused call.
-- A job id whose hash exists already (this call, retried) is returned as not created.
-- A replayed key whose job holds a request hash ('rqh') other than the job's is
-- refused before anything is written (a job from before hashes, or one without,
-- replays as it did).
-- Replies (declared in SUBMIT): state 'ok' (detail: now) then each job's id and
-- created flag, or 'full' (detail: the reason; queued, queued_cost), or 'limited'
-- (detail: ms until enough tokens), or 'reused' (detail: which job, 1-based), or
-- 'paused' (the model is paused and refuses submits).
local stats, seq = KEYS[1], KEYS[2]
local owners, rl = KEYS[3], KEYS[4]
if fence_token ~= '' and redis.call('HGET', KEYS[5], BULK.token) ~= fence_token then
  return reply{state = 'fenced', detail = '', queued = 0, queued_cost = 0}
end
local n = N_GROUPS
local jobs = {}
for i = 1, n do jobs[i] = arg_group(i) end
local now = now_ms()

-- Replays of an idempotency key return the job that key created.
local existing, new_count, new_cost, bulk_cost = {}, 0, 0, 0
for i = 1, n do
  local job = jobs[i]
  local ikey = job.idem
  if ikey ~= '' then
    existing[i] = redis.call('GET', iprefix .. ikey)
    -- A key whose job has expired (result TTL) is free again: a new job, not a 404.
    if existing[i] and redis.call('EXISTS', jprefix .. existing[i]) == 0 then
      existing[i] = false
    end
    if existing[i] and job.rqh ~= '' then
      local made_by = redis.call('HGET', jprefix .. existing[i], JOB.rqh)
      if made_by and made_by ~= job.rqh then
        return reply{state = 'reused', detail = i, queued = 0, queued_cost = 0}
      end
    end
  end
end
-- The same call run again (redis-py retries a script whose reply timed out or
-- whose connection dropped) must not queue the job twice or count it twice:
-- ids are made before the call, so a job hash already there is this call's.
-- One EXISTS over all the call's new ids (the usual answer, 0, ends it); only
-- when some exist is each asked alone.
local fresh = {}
for i = 1, n do if not existing[i] then table.insert(fresh, jprefix .. jobs[i].id) end end
local found = 0
for i = 1, #fresh, 1000 do
  found = found + redis.call('EXISTS', unpack(fresh, i, math.min(i + 999, #fresh)))
end
for i = 1, n do
  local job = jobs[i]
  if found > 0 and not existing[i] and redis.call('EXISTS', jprefix .. job.id) == 1 then
    existing[i] = job.id
  end
  if not existing[i] then
    new_count = new_count + 1
    new_cost = new_cost + job.cost
    if job.prio == RANK.bulk then bulk_cost = bulk_cost + job.cost end
  end
end

if new_count > 0 and redis.call('HGET', KEYS[6], PAUSE.refuse) == '1' then
  return reply{state = 'paused', detail = '', queued = 0, queued_cost = 0}
end

if new_count > 0 and (max_jobs > 0 or max_cost > 0) then
  local queued = 0
  for k = 7, #KEYS do queued = queued + redis.call('ZCARD', KEYS[k]) end
  local queued_cost = tonumber(redis.call('HGET', stats, STAT.queued_cost) or '0')
  if max_jobs > 0 and queued + new_count > max_jobs then
    return reply{state = 'full', detail = 'queue_jobs', queued = queued, queued_cost = queued_cost}
  end
  if max_cost > 0 and queued_cost + new_cost > max_cost then
    return reply{state = 'full', detail = 'queue_cost', queued = queued, queued_cost = queued_cost}
  end
end

if new_count > 0 and owner ~= '' and owner_max > 0 then
  local mine = tonumber(redis.call('HGET', owners, owner) or '0')
  if mine + new_count > owner_max then
    return reply{state = 'full', detail = 'owner_jobs', queued = mine, queued_cost = 0}
  end
end

local tokens = 0
if new_count > 0 and owner ~= '' and rate > 0 then
  tokens = burst
  local state = redis.call('HGET', rl, owner)
  if state then
    local sep = string.find(state, ':', 1, true)
    local last = tonumber(string.sub(state, sep + 1))
    tokens = math.min(burst, tonumber(string.sub(state, 1, sep - 1))
                             + math.max(now - last, 0) * rate / 1000)
  end
  local need = math.min(new_count, burst)
  if tokens < need then
    local wait_ms = math.ceil((need - tokens) * 1000 / rate)
    return reply{state = 'limited', detail = wait_ms, queued = 0, queued_cost = 0}
  end
  redis.call('HSET', rl, owner, string.format('%.4f:%d', tokens - new_count, now))
end
if new_count > 0 and owner ~= '' then redis.call('HINCRBY', owners, owner, new_count) end

local out = reply{state = 'ok', detail = now, queued = 0, queued_cost = 0}
local base = 0
if new_count > 0 then base = redis.call('INCRBY', seq, new_count) - new_count end
local zadds, costs, k = {}, {}, 0
local function opt(f, name, value) f[#f + 1] = name; f[#f + 1] = value end
for i = 1, n do
  local job = jobs[i]
  if existing[i] then
    reply_group(out, {id = existing[i], created = 0})
  else
    local id, bucket, cost, prio = job.id, job.bucket, job.cost, job.prio
    local deadline = 0
    if job.deadline > 0 then deadline = now + job.deadline end
    -- Score: priority class first, then arrival order (a per-model sequence).
    k = k + 1
    local score = int(prio * SCORE_SCALE + base + k)
    -- One HSET per job: the optional fields join the fixed ones only when set.
    local f = {JOB.id, id, JOB.bucket, bucket, JOB.cost, int(cost),
      JOB.prio, int(prio), JOB.status, 'queued', JOB.input, job.input, JOB.meta, job.meta,
      JOB.enq, int(now), JOB.dl, int(deadline), JOB.att, '0', JOB.score, score, JOB.idem, job.idem}
    if owner ~= '' then opt(f, JOB.owner, owner) end
    if job.rqh ~= '' then opt(f, JOB.rqh, job.rqh) end
    if job.whu ~= '' then  -- events and TTL only when not the defaults (every event, HOOK_TTL_S)
      opt(f, JOB.whu, job.whu)
      if job.whe ~= '' then opt(f, JOB.whe, job.whe) end
      if hook_ttl ~= HOOK_TTL_S then opt(f, JOB.wht, hook_ttl) end
    end
    redis.call('HSET', jprefix .. id, unpack(f))
    if not zadds[bucket] then zadds[bucket], costs[bucket] = {}, 0 end
    table.insert(zadds[bucket], score); table.insert(zadds[bucket], id)
    costs[bucket] = costs[bucket] + cost
    if job.idem ~= '' then
      redis.call('SET', iprefix .. job.idem, id, 'EX', idem_ttl)
    end
    reply_group(out, {id = id, created = 1})
  end
end
for bucket, za in pairs(zadds) do
  call_chunked('ZADD', qprefix .. bucket, za, 1000)
  redis.call('HINCRBY', stats, STAT_BUCKET_COST .. bucket, costs[bucket])
  wake(wprefix .. bucket, #za / 2)
end
if new_cost > 0 then redis.call('HINCRBY', stats, STAT.queued_cost, new_cost) end
redis.call('HINCRBY', stats, STAT.arrived, new_count)
redis.call('HINCRBY', stats, STAT.arrived_cost, new_cost)
-- Bulk items (rank 3) are counted apart too: the autoscaler sizes for interactive
-- arrivals and lets bulk work only fill headroom (ADR 0090).
if bulk_cost > 0 then redis.call('HINCRBY', stats, STAT.bulk_arrived_cost, bulk_cost) end
return out
