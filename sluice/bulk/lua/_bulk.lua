-- Bulk helpers, prepended (after the queue's _common.lua) to every bulk script
-- by sluice/lua_loader.py.

-- End a bulk job: its final state, no coordinator, out of the active set and the
-- backlog, and the TTL on its hash, input, output and pending keys.
-- ks: bulk hash, active zset, backlog hash, input list, output hash, pending hash,
-- and the bulk job's webhook delivery hash (nprefix..id: sluice/queue/lua/_common.lua),
-- enqueued here when the upload asked for a webhook on this state.
local function end_bulk(ks, state, id, ttl_s)
  local now = now_ms()
  redis.call('HSET', ks[1], BULK.state, state, BULK.finished, int(now), BULK.token, '')
  local wh = redis.call('HMGET', ks[1], BULK.whu, BULK.whe, BULK.owner, BULK.wht)
  local hook = ks[7] and wh[1] and wants(wh[2] or '', state)
  if hook then
    enqueue_delivery(string.sub(ks[7], 1, #ks[7] - #id), id, 'bulk', state, wh[1], wh[3],
                     now, wh[4])
  end
  redis.call('ZREM', ks[2], id)
  redis.call('HDEL', ks[3], id)
  for _, k in ipairs({ks[1], ks[4], ks[5], ks[6]}) do
    redis.call('EXPIRE', k, tonumber(ttl_s))
  end
  if hook then hold_record(ks[1], ks[7], tonumber(wh[4]) or HOOK_TTL_S) end
end
