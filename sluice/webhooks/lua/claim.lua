-- claim: lease due webhook deliveries to one notifier, per host: a delivery whose
-- host this notifier already has per_host attempts in flight with is not leased (it
-- would only wait for a slot, its lease running) but deferred (docs/adr/0139).
-- KEYS[1] the due zset, in three score bands (DEFER_BAND, MARK_BAND: sluice/webhooks/
--   ops.py): below DEFER_BAND, a delivery id by when it is due (ms); DEFER_BAND + t, a
--   deferred delivery's id, looked at again from t; MARK_BAND + d, member '~' .. id,
--   when that deferred delivery fell due (d: what the oldest-due metric reads).
-- ARGV by name (sluice/webhooks/ops.py CLAIM): nprefix (delivery hash prefix, same
--   hash tag), lease_ms, limit (at most this many), who (the notifier's id), jprefix
--   and bprefix (job and bulk hash prefixes, same hash tag), per_host (0: no cap),
--   scan (entries looked at per band, at most), pace_ms (an attempt's duration at a
--   host with none measured), defer_ms (the longest deferral); then a group per host
--   this notifier has attempts in flight with or deferred to: host, busy, pace (ms,
--   one attempt there), after (ms, its latest deferral there; 0: none).
-- Every entry looked at leaves the range looked at (leased, deferred or removed), so
-- the next call starts at the head again and never re-reads a skipped one: a claim
-- costs at most 2 x scan reads, however long a full host's backlog.
-- A deferral is paced by the host: its k-th deferred delivery is looked at again
-- after ceil(k / per_host) attempts' time there, from its latest deferral on (one
-- back from a deferral: from now), and never later than defer_ms from now (a host
-- that recovers is served within it).
-- A claimed delivery's due time moves to the end of its lease: a notifier that dies
-- mid-attempt leaves it due again then, for another to send with the same id.
-- Each attempt gets a lease token (notifier:attempt); only its holder may record
-- the attempt's outcome (done.lua).
-- Returns {now, more (1: a band had more due than looked at, or the batch filled),
--   horizons (host, the latest deferral there (ms), ...), then per delivery: id,
--   token, att, fails, cerr, url, event, owner, kind, first, ended, body ('' until an
--   attempt is recorded), host, and the job's (or bulk job's) hash as a flat array
--   while there is no body yet (empty once its record has expired)}.
local due = KEYS[1]
local now = now_ms()
local hosts = {}
for i = 1, N_GROUPS do
  local g = arg_group(i)
  hosts[g.host] = {busy = g.busy, pace = g.pace, after = g.after, k = 0, kr = 0, last = 0}
end
local function host_state(h)
  local s = hosts[h]
  if not s then
    s = {busy = 0, pace = pace_ms, after = 0, k = 0, kr = 0, last = 0}
    hosts[h] = s
  end
  return s
end

-- The URL's host as sluice/webhooks/guard.py parse_url gives it: lowercase, no port,
-- no trailing dot, an IPv6 literal without its brackets (submit refused userinfo).
local function host_of(url)
  local auth = string.lower(string.match(url, '^%a[%w+.-]*://([^/?#]*)') or '')
  local v6 = string.match(auth, '^%[(.-)%]')
  if v6 then return v6 end
  return (string.gsub(string.gsub(auth, ':%d*$', ''), '%.$', ''))
end

local function lease(id, host)
  local dk = nprefix .. id
  local f = redis.call('HMGET', dk, 'url', 'event', 'owner', 'kind', 'fails', 'cerr',
                       'first', 'ended', 'body')
  local att = redis.call('HINCRBY', dk, 'att', 1)
  local token = who .. ':' .. att
  redis.call('HSET', dk, 'lease', token)
  redis.call('ZADD', due, now + lease_ms, id)
  redis.call('ZREM', due, '~' .. id)
  local record = {}
  if not f[9] then
    record = redis.call('HGETALL', (f[4] == 'bulk' and bprefix or jprefix) .. id)
  end
  return {id = id, token = token, att = att, fails = f[5] or '0', cerr = f[6] or '0',
          url = f[1], event = f[2], owner = f[3] or '', kind = f[4] or 'job',
          first = f[7] or f[8] or '0', ended = f[8] or '0', body = f[9] or '',
          host = host, record = record}
end

-- Look at it again when the host is likely to have a slot (see the header). One
-- deferred before, back while the host is still full, is at the front of the host's
-- line: it is paced from now, not queued behind the latest deferral. The delivery
-- record is not touched: its next_attempt_at stays what it was.
local function defer(id, score, s)
  local at
  if score >= DEFER_BAND then
    s.kr = s.kr + 1
    at = now + math.ceil(s.kr / per_host) * math.max(1, s.pace)
  else  -- first deferred now: it fell due at its score
    redis.call('ZADD', due, MARK_BAND + score, '~' .. id)
    s.k = s.k + 1
    at = math.max(now, s.after) + math.ceil(s.k / per_host) * math.max(1, s.pace)
  end
  at = math.floor(math.min(at, now + defer_ms))
  redis.call('ZADD', due, DEFER_BAND + at, id)
  if at > s.last then s.last = at end
end

local claimed, more = {}, 0
local function visit(lo, hi)
  local got = redis.call('ZRANGEBYSCORE', due, lo, hi, 'WITHSCORES', 'LIMIT', 0, scan)
  if #got >= 2 * scan then more = 1 end
  for i = 1, #got, 2 do
    if #claimed >= limit then more = 1; return end
    local id, score = got[i], tonumber(got[i + 1])
    local s = redis.call('HMGET', nprefix .. id, 'state', 'url')
    if s[1] ~= 'pending' then
      redis.call('ZREM', due, id, '~' .. id)  -- delivered, given up or expired meanwhile
    else
      local host = host_of(s[2] or '')
      local st = host_state(host)
      if per_host > 0 and st.busy >= per_host then
        defer(id, score, st)
      else
        st.busy = st.busy + 1
        table.insert(claimed, lease(id, host))
      end
    end
  end
end
visit(DEFER_BAND, DEFER_BAND + now)  -- deferred ones back first: they fell due earlier
visit('-inf', now)

-- A mark whose delivery is no longer deferred (redelivered, or recorded by the holder
-- of a lapsed lease) goes once it is the oldest, the only one the metric reads.
for _ = 1, 8 do
  local m = redis.call('ZRANGEBYSCORE', due, MARK_BAND, '+inf', 'LIMIT', 0, 1)[1]
  if not m then break end
  local sc = tonumber(redis.call('ZSCORE', due, string.sub(m, 2)))
  if sc and sc >= DEFER_BAND and sc < MARK_BAND then break end
  redis.call('ZREM', due, m)
end

local horizons = {}
for host, s in pairs(hosts) do
  if s.last > 0 then
    table.insert(horizons, host)
    table.insert(horizons, s.last)
  end
end
local out = reply{now = now, more = more, horizons = horizons}
for _, g in ipairs(claimed) do reply_group(out, g) end
return out
