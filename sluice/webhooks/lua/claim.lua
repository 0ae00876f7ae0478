-- claim: lease due webhook deliveries to one notifier.
-- KEYS[1] the due zset (delivery ids by due time, ms)
-- ARGV[1] nprefix (delivery hash prefix, same hash tag)   ARGV[2] lease ms
-- ARGV[3] at most this many   ARGV[4] the notifier's id
-- ARGV[5] the job hash prefix   ARGV[6] the bulk hash prefix (same hash tag)
-- A claimed delivery's due time moves to the end of its lease: a notifier that dies
-- mid-attempt leaves it due again then, for another to send with the same id.
-- Each attempt gets a lease token (notifier:attempt); only its holder may record
-- the attempt's outcome (done.lua).
-- Returns {now, then per delivery: id, token, attempt, fails, client_errors, url,
--   event, owner, kind, first_ms, ended_ms, body ('' until an attempt is recorded),
--   and the job's (or bulk job's) hash as a flat array while there is no body yet
--   (what the body is rendered from; empty once its record has expired)}.
local due, nprefix = KEYS[1], ARGV[1]
local lease_ms, limit, who = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local now = now_ms()
local out = {now}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, limit)) do
  local dk = nprefix .. id
  local f = redis.call('HMGET', dk, 'state', 'url', 'event', 'owner', 'kind', 'fails', 'cerr',
                       'first', 'ended', 'body')
  if f[1] ~= 'pending' then
    redis.call('ZREM', due, id)  -- delivered, given up or expired meanwhile
  else
    local att = redis.call('HINCRBY', dk, 'att', 1)
    local token = who .. ':' .. att
    redis.call('HSET', dk, 'lease', token)
    redis.call('ZADD', due, now + lease_ms, id)
    for _, v in ipairs({id, token, att, f[6] or '0', f[7] or '0', f[2], f[3], f[4] or '',
                        f[5] or 'job', f[8] or f[9] or '0', f[9] or '0', f[10] or ''}) do
      table.insert(out, v)
    end
    local record = {}
    if not f[10] then
      record = redis.call('HGETALL', (f[5] == 'bulk' and ARGV[6] or ARGV[5]) .. id)
    end
    table.insert(out, record)
  end
end
return out
