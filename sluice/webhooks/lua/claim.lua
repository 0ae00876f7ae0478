-- claim: lease due webhook deliveries to one notifier, per host: a delivery whose
-- host this notifier already has per_host attempts in flight with is skipped, not
-- leased (it would only wait for a slot, its lease running: docs/adr/0139).
-- KEYS[1] the due zset (delivery ids by due time, ms)
-- ARGV by name (sluice/webhooks/ops.py CLAIM): nprefix (delivery hash prefix, same
--   hash tag), lease_ms, limit (at most this many), who (the notifier's id), jprefix
--   and bprefix (job and bulk hash prefixes, same hash tag), per_host (0: no cap),
--   scan (due entries looked at, at most), offset (where in the due range to look);
--   then a group per host this notifier has attempts in flight with: host, busy.
-- The look is bounded (scan entries) and walks on: when it skipped a whole window it
-- returns where the next call should look (next_offset), and past the end it goes
-- on from the start, so a delivery behind a full host's backlog is reached.
-- A claimed delivery's due time moves to the end of its lease: a notifier that dies
-- mid-attempt leaves it due again then, for another to send with the same id.
-- Each attempt gets a lease token (notifier:attempt); only its holder may record
-- the attempt's outcome (done.lua).
-- Returns {now, next_offset, then per delivery: id, token, att, fails, cerr, url,
--   event, owner, kind, first, ended, body ('' until an attempt is recorded), host,
--   and the job's (or bulk job's) hash as a flat array while there is no body yet
--   (what the body is rendered from; empty once its record has expired)}.
local due = KEYS[1]
local now = now_ms()
local used = {}
for i = 1, N_GROUPS do
  local g = arg_group(i)
  used[g.host] = g.busy
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
  local record = {}
  if not f[9] then
    record = redis.call('HGETALL', (f[4] == 'bulk' and bprefix or jprefix) .. id)
  end
  return {id = id, token = token, att = att, fails = f[5] or '0', cerr = f[6] or '0',
          url = f[1], event = f[2], owner = f[3] or '', kind = f[4] or 'job',
          first = f[7] or f[8] or '0', ended = f[8] or '0', body = f[9] or '',
          host = host, record = record}
end

local ids = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', offset, scan)
local window = #ids
local to_end = window < scan
if to_end and offset > 0 then  -- past the end: go on from the start
  local more = math.min(offset, scan - window)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, more)) do
    table.insert(ids, id)
  end
end
local claimed, skipped = {}, 0
for i, id in ipairs(ids) do
  if #claimed >= limit then break end
  local s = redis.call('HMGET', nprefix .. id, 'state', 'url')
  if s[1] ~= 'pending' then
    redis.call('ZREM', due, id)  -- delivered, given up or expired meanwhile
  else
    local host = host_of(s[2] or '')
    local busy = used[host] or 0
    if per_host > 0 and busy >= per_host then
      if i <= window then skipped = skipped + 1 end
    else
      used[host] = busy + 1
      table.insert(claimed, lease(id, host))
    end
  end
end
-- Leased and removed entries left the due range: the next window starts after the
-- skipped ones. A full batch, or a look that reached the end, starts again at the head.
local next_offset = 0
if #claimed < limit and not to_end then next_offset = offset + skipped end
local out = reply{now = now, next_offset = next_offset}
for _, g in ipairs(claimed) do reply_group(out, g) end
return out
