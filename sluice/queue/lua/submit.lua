-- submit: enqueue one or many jobs in one round trip (all or none).
-- KEYS[1] stats hash            KEYS[2] sequence counter
-- KEYS[3] per-owner unfinished-job counts   KEYS[4] per-owner rate-limit state
-- KEYS[5..] the model's queue keys (every bucket), for the admission count
-- ARGV[1] job key prefix        ARGV[2] queue key prefix    ARGV[3] idempotency key prefix
-- ARGV[4] max queued jobs (0 = no limit)   ARGV[5] max queued cost (0 = no limit)
-- ARGV[6] idempotency TTL seconds          ARGV[7] number of jobs N
-- ARGV[8] wake list prefix
-- ARGV[9] owner (API key name, '' = none)   ARGV[10] owner's max unfinished jobs (0 = no limit)
-- ARGV[11] owner's rate limit, jobs/s (0 = none)   ARGV[12] owner's burst (jobs)
-- then N groups of 8: id, bucket, cost, priority rank (0 high .. 2 low, 3 bulk), input JSON,
--   metadata JSON, deadline in ms from now (0 = none), idempotency key ('' = none)
-- Derived keys: ARGV[1]..id, ARGV[2]..bucket, ARGV[3]..idempotency key,
--   ARGV[8]..bucket (same hash tag).
-- Per bucket, pushes min(new jobs, 64) wake tokens onto ARGV[8]..bucket in one
-- LPUSH (each list holds at most 64).
-- Rate limit: a token bucket per owner ("tokens:ms" in KEYS[4]), refilled at
-- ARGV[11]/s up to ARGV[12]; a call needs min(new jobs, burst) tokens and takes
-- one per new job (a batch larger than the burst leaves a debt that later calls
-- wait out). Idempotent replays are free. Nothing is taken from a refused call.
-- A job id whose hash exists already (this call, retried) is returned as not created.
-- Returns {'ok', now, id_1, created_1, ...} or {'full', reason, queued, queued_cost}
-- or {'limited', ms until enough tokens}.
local stats, seq = KEYS[1], KEYS[2]
local jprefix, qprefix, iprefix = ARGV[1], ARGV[2], ARGV[3]
local max_jobs, max_cost = tonumber(ARGV[4]), tonumber(ARGV[5])
local idem_ttl, n, wprefix = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local owners, rl, owner, owner_max = KEYS[3], KEYS[4], ARGV[9], tonumber(ARGV[10])
local rate, burst = tonumber(ARGV[11]), tonumber(ARGV[12])
local G = 13  -- ARGV index of the first job group
local now = now_ms()

-- Replays of an idempotency key return the job that key created.
local existing, new_count, new_cost, bulk_cost = {}, 0, 0, 0
for i = 0, n - 1 do
  local b = G + i * 8
  local ikey = ARGV[b + 7]
  if ikey ~= '' then
    existing[i] = redis.call('GET', iprefix .. ikey)
    -- A key whose job has expired (result TTL) is free again: a new job, not a 404.
    if existing[i] and redis.call('EXISTS', jprefix .. existing[i]) == 0 then
      existing[i] = false
    end
  end
  -- The same call run again (redis-py retries a script whose reply timed out or
  -- whose connection dropped) must not queue the job twice or count it twice:
  -- ids are made before the call, so a job hash already there is this call's.
  if not existing[i] and redis.call('EXISTS', jprefix .. ARGV[b]) == 1 then
    existing[i] = ARGV[b]
  end
  if not existing[i] then
    new_count = new_count + 1
    new_cost = new_cost + tonumber(ARGV[b + 2])
    if tonumber(ARGV[b + 3]) == 3 then bulk_cost = bulk_cost + tonumber(ARGV[b + 2]) end
  end
end

if new_count > 0 and (max_jobs > 0 or max_cost > 0) then
  local queued = 0
  for k = 5, #KEYS do queued = queued + redis.call('ZCARD', KEYS[k]) end
  local queued_cost = tonumber(redis.call('HGET', stats, STAT.queued_cost) or '0')
  if max_jobs > 0 and queued + new_count > max_jobs then
    return {'full', 'queue_jobs', queued, queued_cost}
  end
  if max_cost > 0 and queued_cost + new_cost > max_cost then
    return {'full', 'queue_cost', queued, queued_cost}
  end
end

if new_count > 0 and owner ~= '' and owner_max > 0 then
  local mine = tonumber(redis.call('HGET', owners, owner) or '0')
  if mine + new_count > owner_max then return {'full', 'owner_jobs', mine, 0} end
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
  if tokens < need then return {'limited', math.ceil((need - tokens) * 1000 / rate)} end
  redis.call('HSET', rl, owner, string.format('%.4f:%d', tokens - new_count, now))
end
if new_count > 0 and owner ~= '' then redis.call('HINCRBY', owners, owner, new_count) end

local out = {'ok', now}
local base = 0
if new_count > 0 then base = redis.call('INCRBY', seq, new_count) - new_count end
local zadds, costs, k = {}, {}, 0
for i = 0, n - 1 do
  local b = G + i * 8
  if existing[i] then
    table.insert(out, existing[i]); table.insert(out, 0)
  else
    local id, bucket, cost, prio = ARGV[b], ARGV[b + 1], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
    local rel_deadline = tonumber(ARGV[b + 6])
    local deadline = 0
    if rel_deadline > 0 then deadline = now + rel_deadline end
    -- Score: priority class first, then arrival order (a per-model sequence).
    k = k + 1
    local score = int(prio * SCORE_SCALE + base + k)
    redis.call('HSET', jprefix .. id, 'id', id, 'bucket', bucket, 'cost', int(cost),
      'prio', int(prio), 'status', 'queued', 'input', ARGV[b + 4], 'meta', ARGV[b + 5],
      'enq', int(now), 'dl', int(deadline), 'att', '0', 'score', score, 'idem', ARGV[b + 7])
    if owner ~= '' then redis.call('HSET', jprefix .. id, 'owner', owner) end
    if not zadds[bucket] then zadds[bucket], costs[bucket] = {}, 0 end
    table.insert(zadds[bucket], score); table.insert(zadds[bucket], id)
    costs[bucket] = costs[bucket] + cost
    if ARGV[b + 7] ~= '' then
      redis.call('SET', iprefix .. ARGV[b + 7], id, 'EX', idem_ttl)
    end
    table.insert(out, id); table.insert(out, 1)
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
