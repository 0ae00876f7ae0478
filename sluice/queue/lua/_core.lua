-- The first lines of every script that includes the queue's shared helpers
-- (sluice.lua_loader puts them before the signature's prologue, and a script's
-- early exit may come before the rest of _common.lua: ADR 0177).

-- Redis Cluster: while this script's slot is being moved to another node (a reshard),
-- stop here, before any write. A script touches keys it builds from a prefix (not in
-- KEYS): mid-move, the first one already moved would fail it half-way, its earlier
-- writes kept. So first ask for a key that never exists together with the declared
-- ones: on a stable slot (and outside a cluster) that is one EXISTS; on the node the
-- slot leaves it fails (ASK / TRYAGAIN), and on the node it goes to too (TRYAGAIN).
-- The client turns that into "unavailable, retry" (docs/adr/0134).
if #KEYS > 0 then redis.call('EXISTS', KEYS[1] .. ':slot-probe', unpack(KEYS)) end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function int(x)
  return string.format('%d', x)
end

