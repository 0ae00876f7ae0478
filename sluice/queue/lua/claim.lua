-- claim: reclaim expired leases, pick a bucket, lease up to max_batch jobs from it.
-- KEYS[1] in-flight zset (score = lease expiry ms)   KEYS[2] stats hash
-- KEYS[3] dead-letter list                            KEYS[4] per-owner unfinished-job counts
-- KEYS[5] workers running a bulk batch (zset, lease expiry ms)
-- KEYS[6] live workers (zset, heartbeat expiry s)
-- KEYS[7] live workers that claim nothing (zset, heartbeat expiry s: parked in the warm
--   pool, ADR 0128, starting, draining or quarantined)
-- KEYS[8] retries waiting out their backoff (zset, due ms; docs/adr/0153)
-- KEYS[9] the model's pause record (a hash; absent while it runs: ADR 0154)
-- KEYS[10] workers holding a batch (zset, lease expiry ms; kept only while
--   bulk_idle_reserve > 0: ADR 0164)
-- KEYS[11] live workers' heartbeat info (hash: id -> WorkerInfo JSON; its buckets)
-- KEYS[12..] queue keys served
-- ARGV: the fixed arguments, declared by name in sluice/queue/signatures.py
--   (CLAIM) and read into locals of those names by its generated prologue.
-- Then one group per served queue (arg_group(i): bucket name, expected service_ms;
--   the same order as KEYS[12..]). The reply is declared there too (reply, REPLY,
--   reply_group).
-- Derived keys: jprefix..id, qprefix..bucket, hprefix..window, wake_prefix..bucket
--   (same hash tag).
-- Bulk items (priority rank 3, ADR 0090) always yield: a bucket whose head is a
-- bulk item is chosen only when no served queue has an interactive head, an
-- interactive batch stops at the first bulk item, an all-bulk batch has its own
-- limits, and bulk waits stay out of the wait histogram (they wait by design).
-- A claim that finds every served queue empty empties their wake lists: the
-- tokens there announce jobs already taken, and an idle worker would otherwise
-- spin through them (up to 64), one empty claim each.
-- Bucket choice: highest response ratio next over queue heads,
-- weight[prio] * (wait + service) / service. A head that has waited more than
-- overdue factor x its service time is overdue, and overdue heads go first, oldest
-- first: under sustained overload HRRN alone would let short jobs starve long ones.
-- Priority aging (docs/adr/0100): inside a bucket, jobs go high, normal, low, then
-- arrival order, except that a normal or low job that has waited more than
-- max_priority_wait goes first, oldest first, and counts as an overdue head in the
-- bucket choice. Bulk items are never aged: they only fill headroom (ADR 0090).
-- Token budget (max_cost, bulk_max_cost): padded tokens, batch size x the widest job's
-- cost, floored to a whole number of the bucket's bound (its warm-up shape).
-- Returns {bucket, now, n_expired, n_reclaimed, id, input, cost, attempts, enq, ...}.
-- A paused model (KEYS[9] exists) leases nothing: the claim ends after that one
-- EXISTS, emptying the served wake lists so idle workers block out their wait
-- instead of spinning on tokens; the resume pushes fresh ones. Lapsed leases are
-- reclaimed meanwhile by the autoscaler's upkeep (reclaim.lua).
-- A queued job whose hash lacks a field the protocol needs (or holds garbage in
-- a number) is failed at once as 'malformed_job' instead of breaking every claim.
-- A job's last attempt never goes to the worker whose attempt last failed it (lw)
-- while another serving worker of its bucket is live (ADR 0166): that worker's claim
-- leaves it in its place (see leave), and picks again without a bucket where it met
-- nothing else.

local inflight, stats, dead, owners = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local holders, live_workers, idle_workers = KEYS[5], KEYS[6], KEYS[7]
local retries, busy, infos = KEYS[8], KEYS[10], KEYS[11]
local Q1 = 12  -- KEYS index of the first queue
local served = {}  -- served[k]: the group of KEYS[k]
for k = Q1, #KEYS do served[k] = arg_group(k - Q1 + 1) end
-- The served buckets' wake lists emptied in one DEL (a claim that finds no work).
local function drop_wakes()
  local wakes = {}
  for k = Q1, #KEYS do wakes[#wakes + 1] = wake_prefix .. served[k].bucket end
  if #wakes > 0 then redis.call('DEL', unpack(wakes)) end
end
-- Idle reserve (ADR 0164): with bulk_idle_reserve > 0 every claim records whether
-- its worker now holds a batch (one it took, or one still running beside this
-- claim: `holding`, a prefetch); a worker whose claim found nothing holds none.
-- A worker that stops claiming stays counted as holding until its lease time passes.
local function mark_holding(holds, at)
  if bulk_idle_reserve <= 0 then return end
  if holds then
    redis.call('ZADD', busy, at + lease_ms, worker)
    redis.call('ZREMRANGEBYSCORE', busy, '-inf', at)  -- workers that died holding
  else
    redis.call('ZREM', busy, worker)
  end
end
if redis.call('EXISTS', KEYS[9]) == 1 then
  drop_wakes()
  local t = now_ms()
  mark_holding(holding == 1, t)
  return reply{bucket = '', now = t, expired = 0, reclaimed = 0}
end
local now = now_ms()
local now_s = int(now)  -- as text, once: redis.call formats a Lua number (%.17g) per call
-- Nothing to claim (ADR 0177): every served queue empty (bulk items included), no lease
-- lapsed, no retry due. It ends as the full path would (wake lists emptied, the holding
-- mark, nothing reclaimed), before the shared helpers and the functions below are built.
if #KEYS >= Q1 and redis.call('EXISTS', unpack(KEYS, Q1)) == 0
   and #redis.call('ZRANGEBYSCORE', inflight, '-inf', now_s, 'LIMIT', '0', '1') == 0
   and #redis.call('ZRANGEBYSCORE', retries, '-inf', now_s, 'LIMIT', '0', '1') == 0 then
  drop_wakes()
  mark_holding(holding == 1, now)
  return reply{bucket = '', now = now, expired = 0, reclaimed = 0}
end
-- (the includes go here: sluice.lua_loader)
-- Which required field of a queued job is missing or not a number (false: none).
-- The numbers come parsed (nil: absent or not a number), once per job by consider.
local function malformed(f, cost, dl, att, enq, score)
  if not f[6] then return "no 'input' field" end
  if not f[7] or f[7] == '' then return "no 'bucket' field" end
  -- Plain comparisons, no table per job: this runs for every job claimed.
  if not cost then return "'cost' is not a number" end
  if not enq then return "'enq' is not a number" end
  if not score then return "'score' is not a number" end
  if f[3] and not dl then return "'dl' is not a number" end
  if f[4] and not att then return "'att' is not a number" end
  return false
end

-- Bound again for the functions below: a closure finds what it captures by walking the
-- open upvalues from the newest down, past every helper made since the first binding.
local redis, tonumber, ipairs, unpack, math, table, int, cjson, KEYS =
      redis, tonumber, ipairs, unpack, math, table, int, cjson, KEYS
local weights = {weight_high, weight_normal, weight_low}
local ended = {}

local rt = {key = retries, base = backoff_ms, cap = backoff_max_ms}
local n_reclaimed = reclaim_expired(inflight, stats, dead, jprefix, qprefix, now, reclaim_limit,
                                    max_attempts, dead_ttl, ended, nil, owners, rt, now_s)
-- Retries whose backoff has passed join their queues before the pick (O(log n + k)).
promote_due(retries, jprefix, qprefix, now, reclaim_limit, wake_prefix, now_s)

-- Highest response ratio next among the heads of the served queues.
local BULK_RANK, LOW = RANK.bulk, RANK.low
local BULK_SCORE = BULK_RANK * SCORE_SCALE  -- the lowest score a bulk item has

-- A class's jobs in arrival order: scores [rank * SCORE_SCALE, (rank + 1) * SCORE_SCALE).
-- The bounds as text, each formatted once a call and only when read (string.format
-- costs about as much as the %.17g redis.call gives a Lua number); `limit` is text.
local class_from = {}
local function class_bound(rank)
  local b = class_from[rank]
  if not b then b = int(rank * SCORE_SCALE); class_from[rank] = b end
  return b
end
local function class_range(queue, rank, limit)
  return redis.call('ZRANGEBYSCORE', queue, class_bound(rank), '(' .. class_bound(rank + 1),
                    'LIMIT', '0', limit)
end

-- An unreadable enq reads as 0 (overdue): the scan then drops the record.
local function enq_of(id)
  return tonumber(redis.call('HGET', jprefix .. id, JOB.enq)) or 0
end

-- The oldest enq among normal and low jobs (ranks below the head's, never bulk)
-- that have waited past max_priority_wait behind higher-priority work, or nil.
-- One O(log n) ZRANGEBYSCORE per class: each class is in arrival order.
local function prio_overdue_enq(queue, head_prio)
  local oldest_enq = nil
  if prio_wait <= 0 then return nil end
  for rank = head_prio + 1, LOW do
    local ids = class_range(queue, rank, '1')
    if #ids > 0 then
      local enq = enq_of(ids[1])
      if now - enq > prio_wait and (not oldest_enq or enq < oldest_enq) then oldest_enq = enq end
    end
  end
  return oldest_enq
end

-- Up to `limit` overdue jobs per class (normal, low), oldest first, higher class first
-- on a tie: {enq, rank, place, id}.
local function prio_overdue_ids(queue, limit)
  local found = {}
  if prio_wait <= 0 then return found end
  for rank = 1, LOW do
    -- The class's oldest alone first: when it has not waited past max_priority_wait
    -- (the usual case) none behind it has, and the rest are never read.
    local first = class_range(queue, rank, '1')
    if #first > 0 and now - enq_of(first[1]) > prio_wait then
      for place, id in ipairs(class_range(queue, rank, int(limit))) do
        local enq = enq_of(id)
        if now - enq <= prio_wait then break end
        table.insert(found, {enq, rank, place, id})
      end
    end
  end
  table.sort(found, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    if a[2] ~= b[2] then return a[2] < b[2] end
    return a[3] < b[3]
  end)
  return found
end

-- Set a bucket's cost counters to what its queue holds now (after a malformed
-- record, whose share of them is unknown). O(queue length): malformed records only.
local function recount_cost(stats_key, queue, bucket, jp)
  local total = 0
  local ids = redis.call('ZRANGE', queue, 0, -1)
  for _, id in ipairs(ids) do
    total = total + (tonumber(redis.call('HGET', jp .. id, JOB.cost)) or 0)
  end
  local counted = tonumber(redis.call('HGET', stats_key, STAT_BUCKET_COST .. bucket) or '0') or 0
  if counted ~= total then
    redis.call('HSET', stats_key, STAT_BUCKET_COST .. bucket, int(total))
    redis.call('HINCRBY', stats_key, STAT.queued_cost, int(total - counted))
  end
end

-- Highest response ratio next over the served queues' interactive heads, overdue
-- heads (and buckets with an aged normal or low job) first, oldest first; and the
-- queue whose bulk head is oldest. Returns their KEYS indexes (0: none).
local excluded = {}  -- KEYS index -> true: every job met there was left (ADR 0166)
local function pick_bucket()
  local best, best_ratio, oldest, oldest_enq = 0, -1, 0, now + 1
  local bulk_best, bulk_enq = 0, now + 1
  for k = Q1, #KEYS do
    local head = excluded[k] and {} or redis.call('ZRANGE', KEYS[k], '0', '0', 'WITHSCORES')
    if #head > 0 then
      local prio = math.floor(tonumber(head[2]) / SCORE_SCALE)
      local enq = tonumber(redis.call('HGET', jprefix .. head[1], JOB.enq)) or now
      if prio >= BULK_RANK then
        if enq < bulk_enq then bulk_best, bulk_enq = k, enq end  -- oldest bulk head
      else
        local service = served[k].service_ms
        local wait = math.max(now - enq, 0)
        local ratio = (weights[prio + 1] or 1) * (wait + service) / service
        if ratio > best_ratio then best, best_ratio = k, ratio end
        if wait > overdue_factor * service and enq < oldest_enq then oldest, oldest_enq = k, enq end
        -- A normal or low job waiting past max_priority_wait behind this head makes
        -- its bucket overdue too, as old as that job.
        local pe = prio < LOW and prio_overdue_enq(KEYS[k], prio)
        if pe and pe < oldest_enq then oldest, oldest_enq = k, pe end
      end
    end
  end
  if oldest > 0 then best = oldest end
  return best, bulk_best
end

-- Bulk only while enough serving workers hold no bulk batch (counting this one as a
-- holder): an interactive job that arrives then finds one about to be free. Parked
-- (warm-pool) workers are live but claim nothing until promoted: never free.
-- Reads only: a write before the first memory-taking one would let the whole
-- script run past maxmemory (Redis checks OOM until a script has written).
local function bulk_room()
  local reserve = bulk_reserve
  if reserve <= 0 then return true end
  local held = redis.call('ZCOUNT', holders, '(' .. now, '+inf')
  local mine = tonumber(redis.call('ZSCORE', holders, worker) or '0')
  if mine > now then held = held - 1 end
  local live = redis.call('ZCOUNT', live_workers, now / 1000, '+inf')
  live = live - redis.call('ZCOUNT', idle_workers, now / 1000, '+inf')
  return live - held - 1 >= reserve
end
-- Bulk only while at least bulk_idle_reserve other serving workers hold no batch at
-- all (ADR 0164): an interactive job that arrives then finds an idle worker, never
-- only workers in bulk calls. Serving: live, not parked, starting or draining. The
-- reserve is capped at the other serving workers there are, so a fleet smaller than
-- it still runs bulk while every other worker is idle (a lone worker: always).
-- With no interactive job claimed in this wait window or the last (10-20 s: the
-- histogram hashes record_waits writes) there is no traffic to keep a worker for:
-- bulk may fill the fleet until the next interactive claim.
-- O(live workers); reads only (as bulk_room).
local function interactive_lately()
  local w = math.floor(now / WAIT_WINDOW_MS) * WAIT_WINDOW_MS / 1000
  return redis.call('EXISTS', hprefix .. int(w), hprefix .. int(w - WAIT_WINDOW_MS / 1000)) > 0
end
local function idle_room()
  if bulk_idle_reserve <= 0 or not interactive_lately() then return true end
  local t, others, idle = now / 1000, 0, 0
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', live_workers, t, '+inf')) do
    if w ~= worker and (tonumber(redis.call('ZSCORE', idle_workers, w)) or 0) < t then
      others = others + 1
      if (tonumber(redis.call('ZSCORE', busy, w)) or 0) <= now then idle = idle + 1 end
    end
  end
  return idle >= math.min(bulk_idle_reserve, others)
end
local batch_limit, cost_limit = max_batch, max_cost  -- as sent: each pick starts from them
local best, bulk_best, bulk_batch, queue, bucket
-- Pick the bucket, and the batch's limits there; false: nothing to claim. The budget
-- counts padded tokens (inputs x the widest input's cost), floored to a whole number
-- of the bucket's bound: exactly the largest shape a worker warms up for this bucket
-- (workers/handlers/base.py warmup_shapes).
local function choose()
  best, bulk_best = pick_bucket()
  bulk_batch = best == 0 and bulk_best > 0 and bulk_max_batch > 0 and bulk_room() and idle_room()
  max_batch, max_cost = batch_limit, cost_limit
  if bulk_batch then best, max_batch, max_cost = bulk_best, bulk_max_batch, bulk_max_cost end
  if best == 0 then return false end
  queue, bucket = KEYS[best], served[best].bucket
  local bound = tonumber(bucket)
  if bound and bound > 0 then max_cost = math.max(1, math.floor(max_cost / bound)) * bound end
  return true
end

if not choose() then
  -- Stale tokens go only when the queues are truly empty: bulk items held back (a
  -- prefetch, or no room under reserve_workers) are still work for another worker.
  if bulk_best == 0 then
    drop_wakes()
  end
  mark_holding(holding == 1, now)
  publish_ended(channel, ended, jprefix, nprefix)
  return reply{bucket = '', now = now, expired = 0, reclaimed = n_reclaimed}
end

local out = reply{bucket = bucket, now = now, expired = 0, reclaimed = n_reclaimed}
local taken, widest, n_expired, scanned, n_left = 0, 0, 0, 0, 0
local wait_hist = {}
local bounds = WAIT_BOUNDS_MS
local n_bounds = #bounds
local rem, lease, dropped, recount = {}, {}, 0, false
-- Named and formatted once per call, not per job.
-- The lease's end as the string ZADD stores (a Lua number would be formatted per job).
local lease_until = int(now + lease_ms)
-- Read for every job met (the owner, and when it was first left, only on the rare
-- paths that need them: fewer fields looked up and built into Lua per job).
local READ = {JOB.status, JOB.cost, JOB.dl, JOB.att, JOB.enq, JOB.input, JOB.bucket, JOB.score,
              JOB.last_worker}
local S_STATUS, S_START, S_ATT, S_WORKER = JOB.status, JOB.start, JOB.att, JOB.worker

local function lease_job(id, jk, f, cost_n, att, enq_n)
  att = (att or 0) + 1
  local attempts = att == 1 and '1' or int(att)
  rem[#rem + 1] = id
  dropped = dropped + cost_n
  redis.call('HSET', jk, S_STATUS, 'running', S_START, now_s, S_ATT, attempts, S_WORKER, worker)
  lease[#lease + 1] = lease_until; lease[#lease + 1] = id
  if not bulk_batch then
    local wait = now - enq_n
    local slot = n_bounds + 1
    for i = 1, n_bounds do if wait <= bounds[i] then slot = i; break end end
    wait_hist[slot] = (wait_hist[slot] or 0) + 1
  end
  -- The reply's group without a table per job (reply_row: the declared names in order).
  local input, cost, enq = f[6], f[2], f[5]
  reply_row(out, id, input, cost, attempts, enq)
  taken = taken + 1
  if cost_n > widest then widest = cost_n end
end

-- Last attempts (ADR 0166): whether a serving worker other than this one is live and
-- serves `b`: live in KEYS[6], not in KEYS[7] (parked, starting, draining or
-- quarantined), its heartbeat info listing the bucket (unreadable info: not one, so a
-- job never waits for a worker that cannot take it). O(live workers), read once per
-- bucket and claim, and only by a claim that meets a job it would leave.
local serves = {}
local function another_serves(b)
  if serves[b] ~= nil then return serves[b] end
  local t, found = now / 1000, false
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', live_workers, t, '+inf')) do
    if w ~= worker and (tonumber(redis.call('ZSCORE', idle_workers, w)) or 0) < t then
      local ok, info = pcall(cjson.decode, redis.call('HGET', infos, w) or '')
      for _, name in ipairs(ok and type(info) == 'table' and type(info.buckets) == 'table'
                            and info.buckets or {}) do
        if name == b then found = true end
      end
      if found then break end
    end
  end
  serves[b] = found
  return found
end

-- Whether this claim leaves, in its place, a job whose attempt would be its last and
-- whose previous attempt this worker held: yes while another serving worker of the
-- bucket is live, unless it has waited a lease's time since a claim first left it
-- (a worker that heartbeats but never claims must not strand it). The first leave
-- records when (`since`, else absent) and pushes a wake token: an idle worker takes it.
local function leave(jk, since)
  since = tonumber(since)
  if (since and now - since >= lease_ms) or not another_serves(bucket) then return false end
  if not since then
    redis.call('HSET', jk, JOB.left_at, int(now))
    wake(wake_prefix .. bucket, 1)
  end
  return true
end

-- Three numbers as text to numbers; raises where tonumber would give nil (ADR 0177).
local function parse3(a, b, c) return a + 0, b + 0, c + 0 end

-- Leaves a job that ended in the queue (stale, malformed, past its deadline).
-- Returns false when the job does not fit this batch: it stays in its place.
local function consider(id)
  local jk = jprefix .. id
  local f = redis.call('HMGET', jk, unpack(READ))
  -- Each number read once (nil: absent or garbage, which malformed reports). The three
  -- every job has are parsed by arithmetic (one strtod each; tonumber runs two), which
  -- raises on a missing or garbled one: then each alone, by tonumber, as before.
  local ok, cost, enq, score = pcall(parse3, f[2], f[5], f[8])
  if not ok then cost, enq, score = tonumber(f[2]), tonumber(f[5]), tonumber(f[8]) end
  local dl, att = f[3] and tonumber(f[3]), f[4] and tonumber(f[4])  -- usually absent
  local bad = f[1] == 'queued' and malformed(f, cost, dl, att, enq, score)
  cost, dl = cost or 0, dl or 0
  if f[1] ~= 'queued' then
    rem[#rem + 1] = id  -- a stale entry: the job hash is gone or moved on
  elseif bad then
    -- Written by something other than submit.lua: failed here, alone, without an
    -- attempt (a requeue would need these fields, and it would fail again). What
    -- submit counted for it is unknown (its cost may be garbage): recount the bucket.
    table.insert(rem, id)
    recount = true
    local err = cjson.encode({type = 'malformed_job',
                              message = 'job record unusable: ' .. bad})
    dead_letter(jk, id, stats, dead, err, now, dead_ttl, owners)
    table.insert(ended, id)
  elseif dl > 0 and dl < now then
    table.insert(rem, id)
    dropped = dropped + cost
    release_owner(owners, redis.call('HGET', jk, JOB.owner))
    redis.call('HSET', jk, JOB.status, 'expired', JOB.fin, int(now))
    redis.call('EXPIRE', jk, result_ttl)
    n_expired = n_expired + 1
    table.insert(ended, id)
  elseif f[9] == worker and (att or 0) + 1 >= max_attempts
         and leave(jk, redis.call('HGET', jk, JOB.left_at)) then
    n_left = n_left + 1  -- stays in its place for another worker (ADR 0166)
  elseif taken > 0 and (taken + 1) * (cost > widest and cost or widest) > max_cost then
    return false  -- over budget (padded): it stays at the front for the next batch
  elseif not bulk_batch and score >= BULK_SCORE then  -- rank (score / SCORE_SCALE) bulk
    return false  -- bulk items follow every interactive one: none joins this batch
  else
    lease_job(id, jk, f, cost, att, enq)
    return taken < max_batch
  end
  return true
end

-- Removed before the next ZRANGE, which reads from the front again.
local function flush_rem()
  if #rem > 0 then call_chunked('ZREM', queue, rem, 1000); rem = {} end
end

-- Lease from the chosen queue: jobs past max_priority_wait first, oldest first,
-- then the queue's front, until the batch or its budget is full. Jobs left for
-- another worker stay at the front: each read starts past them.
local function fill_batch()
  local full = false
  if not bulk_batch then
    for _, c in ipairs(prio_overdue_ids(queue, max_batch + 7)) do
      scanned = scanned + 1
      if not consider(c[4]) then full = true; break end
    end
    flush_rem()
  end
  local before = n_left
  while not full do
    local skip = n_left - before
    local ids = redis.call('ZRANGE', queue, skip == 0 and '0' or int(skip),
                           int(skip + max_batch - taken + 7))
    if #ids == 0 then break end
    for _, id in ipairs(ids) do
      if not consider(id) then full = true; break end
    end
    flush_rem()
    scanned = scanned + #ids
    if scanned > 10 * max_batch + 1000 then break end
  end
end

-- What left the chosen queue comes off its cost counters (or, after a malformed
-- record, they are recounted).
local function settle()
  if dropped > 0 then drop_cost(stats, bucket, dropped); dropped = 0 end
  if recount then recount_cost(stats, queue, bucket, jprefix); recount = false end
end

fill_batch()
-- Every job met in the chosen queue was left for another worker: pick again without
-- it, so this worker is not idled by them while other buckets wait (at most once per
-- served queue).
while taken == 0 and n_left > 0 do
  settle()
  excluded[best], n_left, scanned = true, 0, 0
  if not choose() then break end
  out[REPLY.bucket] = bucket
  fill_batch()
end

-- The batch's queue waits go into this window's histogram (layout: sluice/records.py).
local function record_waits()
  local hkey = hprefix .. int(math.floor(now / WAIT_WINDOW_MS) * WAIT_WINDOW_MS / 1000)
  for slot, count in pairs(wait_hist) do
    local label = bounds[slot] and int(bounds[slot]) or WAIT_OVER
    redis.call('HINCRBY', hkey, label, count)
  end
  -- The window's TTL is set once, by the write that creates it.
  if redis.call('HINCRBY', hkey, WAIT_COUNT, taken) == taken then
    redis.call('EXPIRE', hkey, WAIT_HIST_TTL_S)
  end
end

if #lease > 0 then call_chunked('ZADD', inflight, lease, 1000) end
if bulk_batch and taken > 0 then
  redis.call('ZADD', holders, now + lease_ms, worker)
  redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)  -- holders that died
end
mark_holding(taken > 0 or holding == 1, now)
settle()
if n_expired > 0 then redis.call('HINCRBY', stats, STAT.expired, n_expired) end
if taken > 0 and not bulk_batch then record_waits() end
out[REPLY.expired] = n_expired
publish_ended(channel, ended, jprefix, nprefix)
return out
