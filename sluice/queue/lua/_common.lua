-- Shared helpers, prepended to every script by sluice/queue/scripts.py (after _core.lua:
-- the slot probe, now_ms, int).
-- Derived keys: every key built here is ARGV-supplied prefix (from sluice/keys.py,
-- same {model} hash tag as KEYS[1]) plus a job id, bucket name or window.

-- Redis's Lua cannot unpack more than a few thousand values into one call.
local function call_chunked(cmd, key, values, step)
  for i = 1, #values, step do
    redis.call(cmd, key, unpack(values, i, math.min(i + step - 1, #values)))
  end
end

local TERMINAL = {succeeded = true, failed = true, expired = true, cancelled = true}

-- Lower the backlog cost counters for a job leaving its queue.
local function drop_cost(stats, bucket, cost)
  redis.call('HINCRBY', stats, STAT_BUCKET_COST .. bucket, -cost)
  redis.call('HINCRBY', stats, STAT.queued_cost, -cost)
end

local function add_cost(stats, bucket, cost)
  redis.call('HINCRBY', stats, STAT_BUCKET_COST .. bucket, cost)
  redis.call('HINCRBY', stats, STAT.queued_cost, cost)
end

-- A job of an API key (field 'owner') that ends no longer counts against that
-- key's cap on unfinished jobs. Called exactly once per job, where it turns terminal.
local function release_owner(owners, owner)
  if owner and owner ~= '' then
    if redis.call('HINCRBY', owners, owner, -1) <= 0 then redis.call('HDEL', owners, owner) end
  end
end

-- The dead-letter list holds the newest DEAD_CAP ids, newest first. A record
-- lives exactly as long as its id is listed: an id pushed off the end takes its
-- record (and the input it kept) with it, and ids whose record expired
-- (dead_letter_ttl_s) are dropped from the tail, so LLEN counts records that exist.
local DEAD_CAP = 10000

-- Drop up to `limit` ids from the list's tail (the oldest) whose record is gone.
-- Records expire in the order they failed, so the expired ones are a suffix.
local function drop_expired_dead(dead, jprefix, limit)
  for _ = 1, limit do
    local id = redis.call('LINDEX', dead, -1)
    if not id or redis.call('EXISTS', jprefix .. id) == 1 then return end
    redis.call('RPOP', dead)
  end
end

local function push_dead(dead, jprefix, id)
  redis.call('LPUSH', dead, id)
  for _, old in ipairs(redis.call('LRANGE', dead, DEAD_CAP, -1)) do
    if redis.call('HGET', jprefix .. old, JOB.status) == 'failed' then
      redis.call('UNLINK', jprefix .. old)
    end
  end
  redis.call('LTRIM', dead, 0, DEAD_CAP - 1)
  drop_expired_dead(dead, jprefix, 16)
end

-- Terminal failure: keep the error, remember the job in the dead-letter list.
-- Its last worker is kept (as JOB.last_worker) for the operator's dead-letter view.
local function dead_letter(jk, id, stats, dead, err, now, dead_ttl_s, owners)
  local f = redis.call('HMGET', jk, JOB.owner, JOB.worker)
  release_owner(owners, f[1])
  redis.call('HSET', jk, JOB.status, 'failed', JOB.error, err, JOB.fin, int(now))
  if f[2] then redis.call('HSET', jk, JOB.last_worker, f[2]) end
  redis.call('HDEL', jk, JOB.worker, JOB.left_at)
  redis.call('EXPIRE', jk, dead_ttl_s)
  push_dead(dead, string.sub(jk, 1, #jk - #id), id)
  redis.call('HINCRBY', stats, STAT.failed, 1)
end

-- Wake idle workers blocked (BLPOP) on a bucket's wake list: one token per job
-- made claimable, at most WAKE_CAP in the list, one LPUSH. A token whose job
-- another worker took first costs its taker one empty claim, nothing more.
local WAKE_CAP = 64
local function wake(key, n)
  if key and n > 0 then
    local tokens = {}
    for i = 1, math.min(n, WAKE_CAP) do tokens[i] = '1' end
    if redis.call('LPUSH', key, unpack(tokens)) > WAKE_CAP then  -- trimmed only when over
      redis.call('LTRIM', key, 0, WAKE_CAP - 1)
    end
  end
end

-- Retries back off (docs/adr/0153): a requeued job waits in the model's retry zset
-- (rt.key, scored by the ms it becomes claimable) until claim or reclaim promotes
-- it into its queue, in its original place. The wait doubles per attempt from
-- rt.base ms up to rt.cap ms, the second half jittered (the clock's microseconds
-- and the id's last bytes), so jobs that failed together do not return together.
-- rt nil or rt.base 0: straight back to the queue, as a release is.
local function retry_delay_ms(rt, att, id)
  if not rt or rt.base <= 0 then return 0 end
  local d = math.min(rt.cap, rt.base * 2 ^ math.max(0, att - 1))
  local t = redis.call('TIME')
  local r = (tonumber(t[2]) + 31 * string.byte(id, -1) + 7 * string.byte(id, -2)) % 1000
  return math.floor(d / 2 + d / 2 * r / 1000)
end

-- A running job whose attempt ended without a result: back to its queue in its
-- original place (the score it was first queued with) once its backoff has passed
-- (see retry_delay_ms), or dead-lettered. With a wake prefix, a job requeued at once
-- also pushes a token onto its bucket's wake list. The attempt's worker is kept as
-- JOB.last_worker: its claims leave the job's last attempt to another serving worker
-- (claim.lua, docs/adr/0166); the time one first left it is dropped.
-- Returns true when the job reached a terminal state.
local function retry_or_dead(jk, id, inflight, stats, dead, qprefix, err, now,
                             max_attempts, dead_ttl_s, wprefix, owners, rt)
  redis.call('ZREM', inflight, id)
  local f = redis.call('HMGET', jk, JOB.att, JOB.bucket, JOB.score, JOB.cost, JOB.worker)
  local att = tonumber(f[1] or '0') or 0
  if att >= max_attempts then
    dead_letter(jk, id, stats, dead, err, now, dead_ttl_s, owners)
    return true
  end
  local delay = retry_delay_ms(rt, att, id)
  redis.call('HSET', jk, JOB.status, 'queued', JOB.error, err, JOB.last_worker, f[5] or '')
  redis.call('HDEL', jk, JOB.worker, JOB.start, JOB.left_at)
  add_cost(stats, f[2], tonumber(f[4]))
  redis.call('HINCRBY', stats, STAT.retried, 1)
  if delay > 0 then
    redis.call('HSET', jk, JOB.retry_at, int(now + delay))
    redis.call('ZADD', rt.key, now + delay, id)
    return false
  end
  redis.call('ZADD', qprefix .. f[2], f[3], id)
  if wprefix then wake(wprefix .. f[2], 1) end
  return false
end

-- Move up to `limit` retries whose backoff has passed into their queues (one
-- O(log n) range read: the zset is ordered by when each is due). An entry whose
-- job is no longer queued (cancelled, purged, finished by a late result) is dropped.
-- Returns how many were promoted. `now_s`: `now` as text, when the caller has it (a
-- Lua number handed to redis.call is formatted with %.17g on every call: ADR 0177).
local function promote_due(rkey, jprefix, qprefix, now, limit, wprefix, now_s)
  local ids = redis.call('ZRANGEBYSCORE', rkey, '-inf', now_s or now, 'LIMIT', '0', limit)
  local n = 0
  for _, id in ipairs(ids) do
    local jk = jprefix .. id
    local f = redis.call('HMGET', jk, JOB.status, JOB.bucket, JOB.score)
    if f[1] == 'queued' and f[2] and f[3] then
      redis.call('ZADD', qprefix .. f[2], f[3], id)
      redis.call('HDEL', jk, JOB.retry_at)
      if wprefix then wake(wprefix .. f[2], 1) end
      n = n + 1
    end
  end
  if #ids > 0 then call_chunked('ZREM', rkey, ids, 1000) end
  return n
end

-- Requeue or dead-letter every job whose lease ended before `now`.
-- Returns the number reclaimed and appends terminal ids to `ended`. `wprefix`
-- (nil from claim, whose caller takes the jobs itself) wakes idle workers. `now_s`:
-- as promote_due's.
local function reclaim_expired(inflight, stats, dead, jprefix, qprefix, now, limit,
                               max_attempts, dead_ttl_s, ended, wprefix, owners, rt, now_s)
  local ids = redis.call('ZRANGEBYSCORE', inflight, '-inf', now_s or now, 'LIMIT', '0', limit)
  if #ids == 0 then return 0 end  -- the usual case: no table, no encoding
  local err = cjson.encode({type = 'lease_expired',
                            message = 'the worker holding this job stopped renewing its lease'})
  for _, id in ipairs(ids) do
    local jk = jprefix .. id
    if redis.call('HGET', jk, JOB.status) == 'running' then
      if retry_or_dead(jk, id, inflight, stats, dead, qprefix, err, now,
                       max_attempts, dead_ttl_s, wprefix, owners, rt) then
        table.insert(ended, id)
      end
    else
      redis.call('ZREM', inflight, id)
    end
  end
  return #ids
end

-- Webhook deliveries (sluice/webhooks, docs/adr/0131). nprefix..id is one
-- delivery's hash (ids hold a '.', so the names below never collide with one);
-- nprefix..'due' a zset of delivery ids by due time (ms); nprefix..'wake' the list
-- an idle notifier blocks on (at most WAKE_CAP tokens); nprefix..'events' the
-- model's stream of ended jobs (GET /v1/models/{m}/events), about EVENTS_CAP long.
local EVENTS_CAP_S = '10000'  -- as text: sent on every call that ends a job
-- The delivery's record; its due entry and wake token are the caller's (one ZADD
-- and one LPUSH for all the deliveries a call makes). Counters (att, fails, cerr)
-- start absent (0); 'first' (where the retry horizon counts from) is 'ended'
-- until a redelivery sets it.
local function new_delivery(nprefix, id, kind, event, url, owner, now, ttl_s)
  local dk = nprefix .. id
  local fields = {DELIVERY.kind, kind, DELIVERY.event, event, DELIVERY.url, url,
                  DELIVERY.state, 'pending', DELIVERY.ended, int(now)}
  if owner and owner ~= '' then
    table.insert(fields, DELIVERY.owner)
    table.insert(fields, owner)
  end
  redis.call('HSET', dk, unpack(fields))
  redis.call('EXPIRE', dk, tonumber(ttl_s) or HOOK_TTL_S)
end

-- While its delivery is pending, a job's (or bulk job's) record outlives its own
-- TTL: the notifier renders every attempt's body from it (the delivery keeps no
-- copy). Its own TTL is kept on the delivery ('jttl', the first one: a redelivery
-- keeps it) and applied again, counted from then, when the delivery ends (done.lua).
local function hold_record(rk, dk, ttl_s)
  local own = redis.call('TTL', rk)
  if own < 0 then return end  -- gone, or kept without an expiry
  redis.call('HSETNX', dk, DELIVERY.jttl, own)
  if own < ttl_s then redis.call('EXPIRE', rk, ttl_s) end
end

local function enqueue_delivery(nprefix, id, kind, event, url, owner, now, ttl_s)
  new_delivery(nprefix, id, kind, event, url, owner, now, ttl_s)
  redis.call('ZADD', nprefix .. 'due', now, id)
  wake(nprefix .. 'wake', 1)
end

-- Whether `event` is one of the comma-separated `events` (absent: every event).
local function wants(events, event)
  if not events then return true end
  return string.find(',' .. events .. ',', ',' .. event .. ',', 1, true) ~= nil
end

-- Jobs that just ended, as {id, status, whu, whe, owner, wht} (the record's
-- fields, read by the caller): a webhook delivery for each whose submit asked for
-- one (fields 'whu', 'whe', 'wht': url, events, delivery TTL s) on this event, one
-- entry for all of them in the model's event stream, one message on the done channel.
local function publish_known(channel, ended, jprefix, nprefix)
  if #ended == 0 then return end
  local now, fields, due, ids = nil, {}, {}, {}
  for i, e in ipairs(ended) do
    local id, status = e[1], e[2] or 'missing'
    ids[i] = id
    fields[2 * i - 1], fields[2 * i] = id, status
    if e[3] and wants(e[4], status) then
      now = now or now_ms()
      local ttl = tonumber(e[6]) or HOOK_TTL_S
      new_delivery(nprefix, id, 'job', status, e[3], e[5], now, ttl)
      table.insert(due, now)
      table.insert(due, id)
      hold_record(jprefix .. id, nprefix .. id, ttl)
    end
  end
  if #due > 0 then
    call_chunked('ZADD', nprefix .. 'due', due, 1000)
    wake(nprefix .. 'wake', #due / 2)
  end
  for i = 1, #fields, 2000 do  -- unpack's limit: a few thousand values per call
    redis.call('XADD', nprefix .. 'events', 'MAXLEN', '~', EVENTS_CAP_S, '*',
               unpack(fields, i, math.min(i + 1999, #fields)))
  end
  redis.call('PUBLISH', channel, table.concat(ids, ','))
end

-- The same for ended job ids whose fields the caller has not read.
local function publish_ended(channel, ended, jprefix, nprefix)
  local known = {}
  for i, id in ipairs(ended) do
    local f = redis.call('HMGET', jprefix .. id, JOB.status, JOB.whu, JOB.whe, JOB.owner, JOB.wht)
    known[i] = {id, f[1], f[2], f[3], f[4], f[5]}
  end
  publish_known(channel, known, jprefix, nprefix)
end

-- A running job's limits (ADR 0154): past its deadline (dl, absolute ms; 0 none) it
-- ends 'expired'; running longer than max_run_ms since its claim (start) it fails
-- for good as RUN_TIME_EXCEEDED. Returns which, or nil while within both.
-- A field is parsed only when it can matter (no deadline stored: none; no run limit:
-- start unread): Lua parses a number with strtod, thousands of instructions each.
local function over_limit(dl, start, now, max_run_ms)
  dl = dl and dl ~= '0' and tonumber(dl) or 0
  if dl > 0 and dl < now then return 'expired' end
  if max_run_ms <= 0 then return nil end
  start = tonumber(start)
  if start and now - start > max_run_ms then return RUN_TIME_EXCEEDED end
  return nil
end

-- End a running (or requeued) job over a limit: never its result, never a retry.
-- Appends it to `ended` (publish_ended's list). `why` from over_limit.
local function end_over_limit(jk, id, why, k, now, max_run_ms, ended)
  redis.call('ZREM', k.inflight, id)
  if why == 'expired' then
    release_owner(k.owners, redis.call('HGET', jk, JOB.owner))
    redis.call('HSET', jk, JOB.status, 'expired', JOB.fin, int(now))
    redis.call('HDEL', jk, JOB.worker, JOB.input)
    redis.call('EXPIRE', jk, k.result_ttl)
    redis.call('HINCRBY', k.stats, STAT.expired, 1)
  else
    local err = cjson.encode({type = RUN_TIME_EXCEEDED, message = string.format(
      'the job ran longer than limits.max_run_ms (%d ms); not retried', max_run_ms)})
    dead_letter(jk, id, k.stats, k.dead, err, now, k.dead_ttl, k.owners)
  end
  table.insert(ended, id)
end
