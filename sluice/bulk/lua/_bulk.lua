-- Bulk helpers, prepended (after the queue's _common.lua) to every bulk script.

-- End a bulk job: its final state, no coordinator, out of the active set and the
-- backlog, and the TTL on its hash, input, output and pending keys.
-- ks: bulk hash, active zset, backlog hash, input list, output hash, pending hash.
local function end_bulk(ks, state, id, ttl_s)
  redis.call('HSET', ks[1], 'state', state, 'finished', int(now_ms()), 'token', '')
  redis.call('ZREM', ks[2], id)
  redis.call('HDEL', ks[3], id)
  for _, k in ipairs({ks[1], ks[4], ks[5], ks[6]}) do
    redis.call('EXPIRE', k, tonumber(ttl_s))
  end
end
