-- renew: extend the leases this worker still holds.
-- KEYS[1] in-flight zset   KEYS[2] workers running a bulk batch (its entry follows)
-- ARGV[1] job key prefix   ARGV[2] worker id   ARGV[3] lease ms   ARGV[4..] job ids
-- Derived keys: ARGV[1]..id (same hash tag).
-- A lease is renewed only while the job is running under this worker; returns the
-- ids whose lease was lost (reclaimed, cancelled or ended elsewhere).
local inflight, jprefix, worker = KEYS[1], ARGV[1], ARGV[2]
local expiry = now_ms() + tonumber(ARGV[3])
local lost = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local f = redis.call('HMGET', jprefix .. id, 'status', 'worker')
  if f[1] == 'running' and f[2] == worker then
    redis.call('ZADD', inflight, 'XX', expiry, id)
  else
    table.insert(lost, id)
  end
end
if KEYS[2] then redis.call('ZADD', KEYS[2], 'XX', expiry, worker) end
return lost
