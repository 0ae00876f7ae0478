-- claim: lease due webhook deliveries to one notifier, per host: a delivery whose
-- host this notifier already has per_host attempts in flight with is not leased (it
-- would only wait for a slot, its lease running) but moved into its host's lane
-- (docs/adr/0139).
-- KEYS[1] the due zset (delivery id -> when it is due, ms)
-- KEYS[2] the lanes zset (host -> the earliest due ms among its lane's entries)
-- KEYS[3] the lane sizes hash (host -> entries in its lane: what backlog counts)
-- Derived keys, same hash tag: lprefix .. host, a host's lane (delivery id -> due ms;
--   every entry in it is due: it was moved there when due).
-- ARGV by name (sluice/webhooks/ops.py CLAIM): nprefix (delivery hash prefix, same
--   hash tag), lease_ms, limit (at most this many), who (the notifier's id), jprefix
--   and bprefix (job and bulk hash prefixes, same hash tag), per_host (0: no cap),
--   scan (due entries looked at, at most), lprefix (lane key prefix, same hash tag),
--   lanes_max (hosts with a free slot whose lane is walked, at most); then a group per
--   host this notifier has attempts in flight with: host, busy.
-- One round trip: (1) the lanes due now, earliest first: a host with a free slot
-- (per_host - busy - what this call leased) gives up to that many of its lane's
-- entries; a full host is skipped unread (at most N_GROUPS of those are fetched, and
-- lanes_max others). (2) the due zset, as far as scan: a delivery whose host is full
-- moves into its lane, once per time it falls due, so a full host's backlog is read
-- once, not by every claim.
-- A delivery sits in the due zset or in a lane, except one an admin redelivered while
-- in a lane (redeliver.lua writes the due zset): its due entry wins, the lane's is
-- dropped when met, and a lease removes both, so it is never leased twice.
-- A claimed delivery's due time moves to the end of its lease: a notifier that dies
-- mid-attempt leaves it due again then, for another to send with the same id.
-- Each attempt gets a lease token (notifier:attempt); only its holder may record
-- the attempt's outcome (done.lua).
-- Returns {now, more (1: more may be leasable now: the batch filled, or a range had
--   more than was looked at), laned (1: some host has a lane), then per delivery: id,
--   token, att, fails, cerr, url, event, owner, kind, first, ended, body ('' until an
--   attempt is recorded), host, and the job's (or bulk job's) hash as a flat array
--   while there is no body yet (empty once its record has expired)}.
local due, lanes, sizes = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms()
local busy = {}
for i = 1, N_GROUPS do
  local g = arg_group(i)
  busy[g.host] = g.busy
end
local function free_slots(host)
  if per_host <= 0 then return math.huge end
  return per_host - (busy[host] or 0)
end

-- The URL's host as sluice/webhooks/guard.py parse_url gives it: lowercase, no port,
-- no trailing dot, an IPv6 literal without its brackets (submit refused userinfo).
local function host_of(url)
  local auth = string.lower(string.match(url, '^%a[%w+.-]*://([^/?#]*)') or '')
  local v6 = string.match(auth, '^%[(.-)%]')
  if v6 then return v6 end
  return (string.gsub(string.gsub(auth, ':%d*$', ''), '%.$', ''))
end

-- A lane's size and head go to the sizes hash and the lanes zset (or leave them).
local function lane_changed(host)
  local lane = lprefix .. host
  local head = redis.call('ZRANGE', lane, 0, 0, 'WITHSCORES')
  if head[1] then
    redis.call('ZADD', lanes, head[2], host)
    redis.call('HSET', sizes, host, redis.call('ZCARD', lane))
  else
    redis.call('ZREM', lanes, host)
    redis.call('HDEL', sizes, host)
  end
end

local claimed, more = {}, 0
local function lease(id, host)
  local dk = nprefix .. id
  local f = redis.call('HMGET', dk, DELIVERY.url, DELIVERY.event, DELIVERY.owner,
                       DELIVERY.kind, DELIVERY.fails, DELIVERY.cerr, DELIVERY.first,
                       DELIVERY.ended, DELIVERY.body)
  local att = redis.call('HINCRBY', dk, DELIVERY.att, 1)
  local token = who .. ':' .. att
  redis.call('HSET', dk, DELIVERY.lease, token)
  redis.call('ZADD', due, now + lease_ms, id)
  local record = {}
  if not f[9] then
    record = redis.call('HGETALL', (f[4] == 'bulk' and bprefix or jprefix) .. id)
  end
  busy[host] = (busy[host] or 0) + 1
  table.insert(claimed, {
    id = id, token = token, att = att, fails = f[5] or '0', cerr = f[6] or '0',
    url = f[1], event = f[2], owner = f[3] or '', kind = f[4] or 'job',
    first = f[7] or f[8] or '0', ended = f[8] or '0', body = f[9] or '',
    host = host, record = record})
end

-- (1) The lanes, earliest due first.
local walked, full_seen = 0, 0
local heads = redis.call('ZRANGEBYSCORE', lanes, '-inf', now, 'LIMIT', 0, lanes_max + N_GROUPS)
for _, host in ipairs(heads) do
  if #claimed >= limit then more = 1; break end
  local n = math.min(free_slots(host), limit - #claimed)
  if n > 0 then
    walked = walked + 1
    local lane = lprefix .. host
    local got = redis.call('ZRANGEBYSCORE', lane, '-inf', now, 'LIMIT', 0, n)
    for _, id in ipairs(got) do
      redis.call('ZREM', lane, id)
      local s = redis.call('HMGET', nprefix .. id, DELIVERY.state)
      -- Gone, ended, or redelivered meanwhile (its due entry decides): dropped here.
      if s[1] == 'pending' and not redis.call('ZSCORE', due, id) then
        lease(id, host)
      else
        more = 1  -- its slot is still free: the next claim takes the next one
      end
    end
    lane_changed(host)
    if walked >= lanes_max then
      if #heads > walked + full_seen then more = 1 end
      break
    end
  else
    full_seen = full_seen + 1
  end
end

-- (2) The due zset, in due order.
local got = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'WITHSCORES', 'LIMIT', 0, scan)
if #got >= 2 * scan then more = 1 end
local moved = {}
for i = 1, #got, 2 do
  if #claimed >= limit then more = 1; break end
  local id, score = got[i], tonumber(got[i + 1])
  local s = redis.call('HMGET', nprefix .. id, DELIVERY.state, DELIVERY.url)
  if s[1] ~= 'pending' then
    redis.call('ZREM', due, id)  -- delivered, given up or expired meanwhile
  else
    local host = host_of(s[2] or '')
    if free_slots(host) <= 0 then
      redis.call('ZREM', due, id)
      redis.call('ZADD', lprefix .. host, score, id)
      moved[host] = true
    else
      -- a redelivered one's lane entry, if any, goes with the lease
      if redis.call('ZREM', lprefix .. host, id) == 1 then moved[host] = true end
      lease(id, host)
    end
  end
end
for host in pairs(moved) do lane_changed(host) end

local laned = redis.call('EXISTS', lanes)
local out = reply{now = now, more = more, laned = laned}
for _, g in ipairs(claimed) do reply_group(out, g) end
return out
